"""The allocator's container event rules on the in-memory store (`eru.testing.memory_store`, its container events
capability: `eru.store.container_events`), in milliseconds: a deploy finishes once all its containers reported, a
redelivered message is applied once, a failed container gives its resources back, containers no agent answered for
fail, the live containers of a silent node are lost (and announced), and one started after it was given up is
removed. The contract suite (tests/integration/store/test_container_events_contract.py) proves the fake answers as
PostgreSQL does. The context holds the store's capabilities only (no pool): the handlers speak only the protocols.
"""

from __future__ import annotations

import json
from typing import Any

from eru.bus import new_envelope
from eru.bus.subjects import container_event, deploy_event, node_command
from eru.domain import ContainerEvent, ResourceRequest
from eru.planning import NodeResources
from eru.store.protocol import ContainerRow, DeployRow, PodWrites, Usage
from eru.testing.memory_store import InMemoryStore
from eru_allocator.containers.events import EventContext, Report, apply_events, fail_overdue
from eru_allocator.containers.node_down import mark_down_lost

POD = "cp"
ALLOCATION = json.dumps({"cpu_map": {"0": 50}, "memory": 64 << 20})
HALF_CORE = ResourceRequest(cpu_bind=True, cpu_request=0.5, memory_request=64 << 20).model_dump_json()


async def _store(states: dict[str, str], node_of: dict[str, str] | None = None) -> tuple[InMemoryStore, EventContext]:
    """Deploy d1 (planned) with a container per `states` entry, each holding half a core and 64 MiB of its node."""
    store = InMemoryStore()
    store.add_pod(POD)
    for node in ("n1", "n2"):
        store.add_node(POD, NodeResources(node, {"0": 100, "1": 100}, 4 << 30))
        store.heartbeat(node)
    nodes = node_of or {}
    deploy = DeployRow("d1", "k1", POD, "acme", "planned", "{}", json.dumps({"placements": {"n1": len(states)}}))
    rows = [
        ContainerRow(
            cid,
            "d1",
            nodes.get(cid, "n1"),
            POD,
            "web",
            "busybox",
            "acme",
            "prod",
            0,
            ALLOCATION,
            HALF_CORE,
            state,
            "{}",
            None,
        )
        for cid, state in states.items()
    ]
    usage: dict[str, list[Usage]] = {}
    for row in rows:
        usage.setdefault(row.node, []).append(Usage({"0": 50}, 64 << 20, {}))
    async with store.pod(POD) as session:
        await session.submit(PodWrites(deploys=[deploy], containers=rows, usage=usage))
    ctx = EventContext("allocator/test", store, store)
    return store, ctx


def _report(cid: str, kind: str, reason: str = "", node: str = "n1") -> Report:
    event = ContainerEvent(node=node, container_id=cid, deploy_id="d1", kind=kind, reason=reason)
    return [event], new_envelope(f"eru.container.{kind}", "agent/test")


def _used(store: InMemoryStore, node: str) -> tuple[int, int]:
    resources = store.nodes[node].resources
    return resources.used_cpu_map.get("0", 0), resources.used_memory


def _subjects(store: InMemoryStore) -> list[str]:
    return [message.subject for message in store.outbox]


def _body(store: InMemoryStore, subject: str) -> Any:
    [message] = [m for m in store.outbox if m.subject == subject]
    return message.message


async def test_a_deploy_completes_once_all_its_containers_started() -> None:
    store, ctx = await _store({"c1": "planned", "c2": "planned"})
    await apply_events(ctx, [_report("c1", "started")])
    assert store.deploys["d1"].status == "planned"
    assert _subjects(store) == [deploy_event("d1", "progress")]
    await apply_events(ctx, [_report("c2", "started")])
    assert [row.state for row in store.containers.values()] == ["running", "running"]
    assert store.deploys["d1"].status == "completed"
    assert _body(store, deploy_event("d1", "completed")).started == ["c1", "c2"]
    assert json.loads(store.deploys["d1"].result)["placements"] == {"n1": 2}
    assert _used(store, "n1") == (100, 128 << 20), "a started container keeps what it holds"


async def test_a_redelivered_message_is_applied_once() -> None:
    store, ctx = await _store({"c1": "planned", "c2": "planned"})
    started = _report("c1", "started")
    await apply_events(ctx, [started])
    outbox = list(store.outbox)
    events, envelope = started
    again = [events[0].model_copy(update={"kind": "failed"})], envelope  # same message id, another content
    await apply_events(ctx, [again])
    assert store.containers["c1"].state == "running"
    assert store.outbox == outbox


async def test_a_failed_container_gives_its_resources_back_and_the_deploy_ends_partial() -> None:
    store, ctx = await _store({"c1": "planned", "c2": "planned"})
    await apply_events(ctx, [_report("c1", "started"), _report("c2", "failed", "image not found")])
    assert store.containers["c2"].state == "failed"
    assert _used(store, "n1") == (50, 64 << 20)
    assert store.deploys["d1"].status == "partial"
    assert _body(store, deploy_event("d1", "partial")).failed == {"c2": "image not found"}


async def test_an_event_naming_another_node_changes_nothing() -> None:
    # an agent speaks only for its own node: n2's agent reporting n1's container failed must not give its
    # resources back nor end the deploy (eru.nodeagent.reporters)
    store, ctx = await _store({"c1": "planned", "c2": "planned"})
    await apply_events(ctx, [_report("c1", "failed", "forged", node="n2"), _report("c2", "removed", node="n2")])
    assert [row.state for row in store.containers.values()] == ["planned", "planned"]
    assert _used(store, "n1") == (100, 128 << 20)
    assert store.deploys["d1"].status == "planned"
    await apply_events(ctx, [_report("c1", "started"), _report("c2", "started")])  # n1's own agent is heard
    assert store.deploys["d1"].status == "completed"


async def test_containers_no_agent_answered_for_fail_once() -> None:
    store, ctx = await _store({"c1": "planned", "c2": "creating"})
    assert await fail_overdue(ctx, 30) == 0
    store.now = 100.0
    assert await fail_overdue(ctx, 30) == 2
    assert {row.state for row in store.containers.values()} == {"failed"}
    assert store.event_row("c1").reason == "no answer from node n1 within 30s"
    assert _used(store, "n1") == (0, 0)
    assert store.deploys["d1"].status == "failed"
    assert await fail_overdue(ctx, 30) == 0


async def test_the_live_containers_of_a_silent_node_are_lost_and_announced() -> None:
    store, ctx = await _store({"c1": "running", "c2": "running"}, node_of={"c2": "n2"})
    store.now = 100.0
    store.heartbeat("n2")
    assert await mark_down_lost(ctx, 30) == 1
    assert (store.containers["c1"].state, store.containers["c2"].state) == ("lost", "running")
    assert "no heartbeat for 100s" in (store.event_row("c1").reason or "")
    assert _used(store, "n1") == (0, 0)
    assert container_event("n1", "lost") in _subjects(store)
    assert await mark_down_lost(ctx, 30) == 0, "a lost container is not lost again"


async def test_a_container_started_after_it_was_given_up_is_removed() -> None:
    store, ctx = await _store({"c1": "failed"})
    await apply_events(ctx, [_report("c1", "started")])
    assert store.containers["c1"].state == "failed"
    assert _body(store, node_command("n1", "remove")).container_id == "c1"
