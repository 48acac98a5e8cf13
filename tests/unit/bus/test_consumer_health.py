"""The `degraded` rule of `eru status` (docs/operations.md "Degraded"), as a pure function, and how it shows in
the status document."""

from __future__ import annotations

from eru.bus.consumer_health import ConsumerFacts, Thresholds, assess, service_of
from eru.cli.stack_commands import status_document


def facts(**changes: object) -> ConsumerFacts:
    base: dict[str, object] = {
        "stream": "ERU_DEPLOY",
        "name": "allocator-deploy",
        "redelivered": 0,
        "ack_pending": 0,
        "pending": 0,
        "oldest_unacked_seconds": None,
        "dead_lettered_recently": 0,
    }
    return ConsumerFacts(**{**base, **changes})  # type: ignore[arg-type]


def test_a_consumer_keeping_up_is_ok() -> None:
    entry = assess(facts(ack_pending=3, oldest_unacked_seconds=2.0))
    assert entry["state"] == "ok"
    assert entry["reasons"] == []


def test_redeliveries_an_old_backlog_or_recent_dead_letters_degrade_it_with_the_counts() -> None:
    assert assess(facts(redelivered=2))["reasons"] == ["2 redelivered"]
    old = assess(facts(pending=40, ack_pending=64, oldest_unacked_seconds=45.2))
    assert old["state"] == "degraded"
    assert old["reasons"] == ["backlog 104 messages, oldest 45s"]
    assert assess(facts(dead_lettered_recently=3))["reasons"] == ["3 dead-lettered in the last 60s"]
    # 30 s is the line: a backlog exactly that old, or an old timestamp with nothing pending, is not degraded
    assert assess(facts(pending=1, oldest_unacked_seconds=30.0))["state"] == "ok"
    assert assess(facts(oldest_unacked_seconds=300.0))["state"] == "ok"
    assert assess(facts(pending=1, oldest_unacked_seconds=5.0), Thresholds(backlog_seconds=1.0))["state"] == "degraded"


def test_consumers_belong_to_services_by_name() -> None:
    assert service_of("allocator-deploy") == "allocator"
    assert service_of("node-agent-sim-001") == "node-agent"
    assert service_of("node-group-sim1") == "node-agent"
    assert service_of("something-else") == "something-else"


def test_a_ready_service_with_a_degraded_consumer_is_degraded_in_the_document() -> None:
    replicas = [
        {"service": name, "replica": "r1", "version": "0.1.0", "ready": True}
        for name in ("allocator", "distributor", "node-agent", "eviction")
    ]
    consumers = [assess(facts(dead_lettered_recently=2)), assess(facts(name="allocator-heartbeats"))]
    doc = status_document(
        nats={"state": "up", "url": "nats://x", "detail": ""},
        postgres={"state": "up", "version": "18.1", "detail": "", "dsn": None},
        replicas=replicas,
        consumers=consumers,
    )
    allocator = next(s for s in doc["services"] if s["name"] == "allocator")
    assert allocator["state"] == "degraded"
    assert [c["name"] for c in allocator["consumers"]] == ["allocator-deploy", "allocator-heartbeats"]
    assert doc["degraded"] == ["allocator"]
    assert doc["healthy"] is True, "degraded is reported, it is not down"
    assert next(s for s in doc["services"] if s["name"] == "distributor")["state"] == "ready"
