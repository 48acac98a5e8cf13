"""Is each service's durable consumer keeping up? (`eru status`, docs/operations.md "Degraded").

A consumer is **degraded** when any of these holds (the thresholds are `Thresholds`):

* it has messages being redelivered now (`num_redelivered` > 0: a handler failed transiently or hung past ack_wait);
* its backlog is old: the oldest message it has not acknowledged was stored more than 30 s ago;
* it dead-lettered anything in the last minute.

`assess` is the pure rule over facts gathered by `gather` (JetStream consumer info, the stored time of the oldest
unacknowledged message, the dead letters of the last minute per consumer).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from nats.js import JetStreamContext, api
from nats.js.errors import NotFoundError

from eru.bus.dead_letters import H_CONSUMER
from eru.bus.streams import DEPLOY, DLQ, EVENTS, METRICS, NODE, PARTITIONS

CONSUMER_STREAMS = (DEPLOY, NODE, EVENTS, METRICS, PARTITIONS)
_SERVICE_PREFIXES = (
    ("allocator-", "allocator"),
    ("node-agent-", "node-agent"),
    ("node-group-", "node-agent"),  # a sim process's command group (eru.bus.node_groups)
    ("eviction-", "eviction"),
)


@dataclass(frozen=True)
class Thresholds:
    """When a consumer counts as degraded."""

    backlog_seconds: float = 30.0
    dead_letter_window_seconds: float = 60.0


@dataclass(frozen=True)
class ConsumerFacts:
    """What JetStream says about one durable consumer (and the age of its oldest unacknowledged message)."""

    stream: str
    name: str
    redelivered: int
    ack_pending: int
    pending: int
    oldest_unacked_seconds: float | None
    dead_lettered_recently: int = 0


def service_of(durable: str) -> str:
    """The service a durable consumer belongs to, by its name (`allocator-deploy` → allocator)."""
    for prefix, service in _SERVICE_PREFIXES:
        if durable.startswith(prefix):
            return service
    return durable


def assess(facts: ConsumerFacts, thresholds: Thresholds = Thresholds()) -> dict[str, Any]:
    """The status entry of one consumer: its numbers, `state` ok|degraded and the reasons (pure)."""
    reasons = []
    if facts.redelivered > 0:
        reasons.append(f"{facts.redelivered} redelivered")
    age = facts.oldest_unacked_seconds
    if age is not None and age > thresholds.backlog_seconds and (facts.pending or facts.ack_pending):
        reasons.append(f"backlog {facts.pending + facts.ack_pending} messages, oldest {age:.0f}s")
    if facts.dead_lettered_recently > 0:
        window = f"{thresholds.dead_letter_window_seconds:g}s"
        reasons.append(f"{facts.dead_lettered_recently} dead-lettered in the last {window}")
    return {
        "stream": facts.stream,
        "name": facts.name,
        "service": service_of(facts.name),
        "state": "degraded" if reasons else "ok",
        "reasons": reasons,
        "redelivered": facts.redelivered,
        "ack_pending": facts.ack_pending,
        "pending": facts.pending,
        "oldest_unacked_seconds": None if age is None else round(age, 1),
        "dead_lettered_recently": facts.dead_lettered_recently,
    }


async def _oldest_unacked_age(js: JetStreamContext, stream: str, info: Any, now: datetime) -> float | None:
    if not (info.num_pending or info.num_ack_pending):
        return None
    floor = info.ack_floor.stream_seq if info.ack_floor else 0
    with contextlib.suppress(NotFoundError):
        message = await js.get_msg(stream, (floor or 0) + 1)
        if message.time is not None:
            return max(0.0, float((now - message.time).total_seconds()))
    return None


def _starting(since: datetime) -> dict[str, Any]:
    # the server wants RFC 3339 text; nats-py sends the field as given (as eru.bus.history does)
    return {"deliver_policy": api.DeliverPolicy.BY_START_TIME, "opt_start_time": since.isoformat()}


async def dead_letters_since(js: JetStreamContext, since: datetime) -> dict[str, int]:
    """Dead letters stored since `since`, counted per consumer (an ephemeral reader, removed at the end)."""
    counts: dict[str, int] = {}
    try:
        await js.stream_info(DLQ)
    except NotFoundError:
        return counts
    config = api.ConsumerConfig(
        ack_policy=api.AckPolicy.NONE,
        inactive_threshold=30.0,
        mem_storage=True,
        headers_only=True,
        **_starting(since),
    )
    consumer = await js.add_consumer(DLQ, config=config)
    if consumer.num_pending == 0:
        with contextlib.suppress(Exception):
            await js.delete_consumer(DLQ, consumer.name)
        return counts
    subscription = await js.pull_subscribe_bind(stream=DLQ, name=consumer.name)
    try:
        while True:
            try:
                messages = await subscription.fetch(256, timeout=1.0)
            except TimeoutError:
                break
            for msg in messages:
                name = (msg.headers or {}).get(H_CONSUMER, "")
                counts[name] = counts.get(name, 0) + 1
            if messages and messages[-1].metadata.num_pending == 0:
                break
    finally:
        with contextlib.suppress(Exception):
            await subscription.unsubscribe()
        with contextlib.suppress(Exception):
            await js.delete_consumer(DLQ, consumer.name)
    return counts


async def gather(
    js: JetStreamContext, thresholds: Thresholds = Thresholds(), now: datetime | None = None
) -> list[dict[str, Any]]:
    """The assessed entry of every durable consumer of eru's streams (ephemeral readers are left out)."""
    now = now or datetime.now(UTC)
    recent = await dead_letters_since(js, now - timedelta(seconds=thresholds.dead_letter_window_seconds))
    entries = []
    for stream in CONSUMER_STREAMS:
        try:
            infos = await js.consumers_info(stream)
        except NotFoundError:
            continue
        for info in infos:
            if not info.config.durable_name:
                continue
            facts = ConsumerFacts(
                stream=stream,
                name=info.name,
                redelivered=info.num_redelivered or 0,
                ack_pending=info.num_ack_pending or 0,
                pending=info.num_pending or 0,
                oldest_unacked_seconds=await _oldest_unacked_age(js, stream, info, now),
                dead_lettered_recently=recent.get(info.name, 0),
            )
            entries.append(assess(facts, thresholds))
    return sorted(entries, key=lambda entry: (entry["service"], entry["name"]))
