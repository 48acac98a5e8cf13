"""The console's live feed: bus messages routed to browsers; bad bodies skipped; a slow browser told to resync."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import msgpack

from eru.console.feed import KEPT_SUBJECTS, QUEUE_SIZE, SUBJECTS, Feed


@dataclass
class Message:
    """What the feed reads from a nats-py message."""

    subject: str
    data: bytes
    headers: dict[str, str] = field(default_factory=dict)


def _packed(body: Any) -> bytes:
    return bytes(msgpack.packb(body))


async def test_messages_reach_browsers_and_bad_ones_are_skipped() -> None:
    feed = Feed()
    browser = feed.listen()
    await feed._on_message(Message("eru.container.n1.started", b"\xc1 not msgpack"))
    await feed._on_message(Message("eru.container.n1.started", _packed([1, 2, 3])))  # not an object
    await feed._on_message(Message("eru.eviction.n1", _packed({"decision_id": "d1", "node": "n1", "kind": "evict"})))
    await feed._on_message(Message("eru.eviction.n1", _packed({"decision_id": "d1", "node": "n1", "kind": "evict"})))
    events = [{"container_id": "c1", "kind": "started"}, {"container_id": "c2", "kind": "failed"}]
    await feed._on_message(Message("eru.container.n2.batch", _packed({"node": "n2", "events": events})))
    grouped = [{"node": "sim-7", "container_id": "c3", "kind": "started"}]
    await feed._on_message(Message("eru.group.sim.results", _packed({"group": "sim", "events": grouped})))
    await feed._on_message(
        Message("eru.deploy.d7.completed", json.dumps({}).encode(), {"Content-Type": "application/json"})
    )
    await feed._on_message(
        Message("eru.metrics.n1", _packed({"cpu_capacity": 4, "cpu_used": 1, "memory_total": 8, "memory_used": 2}))
    )
    sent = [browser.get_nowait() for _ in range(browser.qsize())]
    assert [event for event, _ in sent] == ["eviction", "container", "container", "container", "deploy"]  # d1 once
    assert json.loads(sent[2][1]) == {"node": "n2", "container_id": "c2", "kind": "failed", "deploy_id": None}
    assert json.loads(sent[3][1]) == {"node": "sim-7", "container_id": "c3", "kind": "started", "deploy_id": None}
    assert [e["decision_id"] for e in feed.evictions] == ["d1"]
    assert feed.usage["n1"]["cpu_percent"] == 25.0
    assert feed.usage["n1"]["memory_percent"] == 25.0
    assert feed.nodes_dirty


async def test_a_browser_that_falls_behind_is_told_to_resync() -> None:
    feed = Feed()
    browser = feed.listen()
    for index in range(QUEUE_SIZE + 5):
        feed.broadcast("deploy", {"deploy_id": f"d{index}"})
    assert browser.qsize() <= QUEUE_SIZE
    assert ("resync", "{}") in [browser.get_nowait() for _ in range(browser.qsize())]
    feed.forget(browser)
    feed.broadcast("deploy", {"deploy_id": "late"})
    assert browser.empty()
    await asyncio.sleep(0)


@dataclass
class FakeSubscription:
    subject: str
    connection: FakeConnection

    async def unsubscribe(self) -> None:
        self.connection.subjects.remove(self.subject)


@dataclass
class FakeConnection:
    subjects: list[str] = field(default_factory=list)

    async def subscribe(self, subject: str, cb: Any) -> FakeSubscription:
        self.subjects.append(subject)
        return FakeSubscription(subject, self)

    async def flush(self) -> None:
        pass

    def jetstream(self) -> Any:
        raise RuntimeError("no JetStream here: the eviction history is skipped")


async def test_container_and_deploy_events_are_read_only_while_a_browser_listens() -> None:
    nc = FakeConnection()
    feed = Feed()
    await feed.start(nc)
    assert nc.subjects == list(KEPT_SUBJECTS)
    assert not feed.following
    assert feed.nodes_dirty  # nothing says the nodes did not change: a node page reads them afresh
    first, second = feed.listen(), feed.listen()
    await feed.followed()
    assert sorted(nc.subjects) == sorted(SUBJECTS)
    feed.nodes_dirty = False
    assert not feed.nodes_dirty
    feed.forget(first)
    await feed.followed()
    assert feed.following
    feed.forget(second)
    feed.listen()  # a reload: gone and back before the unsubscribing ran
    await feed.followed()
    assert sorted(nc.subjects) == sorted(SUBJECTS)
    feed.forget(next(iter(feed.listeners)))
    await feed.followed()
    assert nc.subjects == list(KEPT_SUBJECTS)
    await feed.stop()
    assert nc.subjects == []
