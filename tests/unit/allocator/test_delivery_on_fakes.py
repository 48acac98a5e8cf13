"""The delivery package (eru_allocator.delivery) on the in-memory store's delivery capability (`eru.store.delivery`),
in milliseconds: the relay publishes each committed row once with its event id as `Nats-Msg-Id` (a deploy's messages
queued by its pod session too, a tenant's copy of its deploy events), a failed publish leaves the rows to the next
burst; the committing process's publisher marks what was acked and hands back what failed; a settled operation answers
its first reply without running again; the dead-letter recorder settles a deploy's letter (and naks while the store is
away). The contract suite (tests/integration/store/test_delivery_contract.py) proves the fake answers as PostgreSQL
does.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from eru.bus import encode, new_envelope
from eru.bus.codec import MSGPACK
from eru.bus.dead_letters import H_REASON, H_SUBJECT
from eru.bus.envelope import H_CONTENT_TYPE, H_MSG_ID
from eru.domain import DeployEvent, DeployRequest
from eru.domain.messages import OperationReply
from eru.store import StoreUnavailable
from eru.store.protocol import DeployRow, OutboxMessage, PodWrites
from eru.testing.memory_store import InMemoryStore
from eru_allocator.delivery.dead_letter_recorder import dead_letter_recorder
from eru_allocator.delivery.outbox import relay_once
from eru_allocator.delivery.publisher import CommittedPublisher
from eru_allocator.delivery.settled import at_most_once

POD = "cp"


@dataclass
class FakeJetStream:
    """`publish_async` that stores each message (or fails its ack when `failing`)."""

    failing: bool = False
    stored: list[tuple[str, bytes, dict[str, str]]] = field(default_factory=list)

    async def publish_async(self, subject: str, body: bytes, headers: dict[str, str]) -> asyncio.Future[None]:
        ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.failing:
            ack.set_exception(ConnectionError("no JetStream"))
        else:
            self.stored.append((subject, body, headers))
            ack.set_result(None)
        return ack


@dataclass
class FakeCore:
    """A core NATS connection that records what is published."""

    sent: list[str] = field(default_factory=list)

    async def publish(self, subject: str, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.sent.append(subject)


def _event(deploy_id: str, kind: str) -> OutboxMessage:
    return OutboxMessage(
        f"eru.deploy.{deploy_id}.{kind}", DeployEvent(deploy_id=deploy_id, kind=kind), new_envelope("e", "t")
    )


async def _deploy_with_events(store: InMemoryStore, deploy_id: str, tenant: str, *kinds: str) -> list[OutboxMessage]:
    messages = [_event(deploy_id, kind) for kind in kinds]
    row = DeployRow(deploy_id, f"r-{deploy_id}", POD, tenant, "planned", "{}", "{}")
    async with store.pod(POD) as session:
        await session.submit(PodWrites(deploys=[row], messages=messages))
    return messages


async def test_the_relay_publishes_each_committed_message_once_and_marks_it() -> None:
    store, js, nc = InMemoryStore(), FakeJetStream(), FakeCore()
    store.add_pod(POD)
    messages = await _deploy_with_events(store, "d1", "acme/web", "planned", "completed")
    assert await relay_once(store, js, 100, nc) == 2  # type: ignore[arg-type]
    assert await relay_once(store, js, 100, nc) == 0  # type: ignore[arg-type]
    assert [(subject, headers[H_MSG_ID]) for subject, _, headers in js.stored] == [
        (m.subject, m.envelope.id) for m in messages
    ]
    assert js.stored[0][1] == encode(messages[0].message)
    assert js.stored[0][2][H_CONTENT_TYPE] == MSGPACK
    assert nc.sent == ["eru.t.acme.deploy.d1.planned", "eru.t.acme.deploy.d1.completed"]  # the group's parent


async def test_a_failed_publish_leaves_the_rows_to_the_next_burst() -> None:
    store = InMemoryStore()
    store.add_pod(POD)
    await _deploy_with_events(store, "d1", "default", "planned")
    broken = FakeJetStream(failing=True)
    try:
        await relay_once(store, broken, 100)  # type: ignore[arg-type]
    except ConnectionError:
        pass
    else:
        raise AssertionError("the failed ack must fail the burst")
    working = FakeJetStream()
    assert await relay_once(store, working, 100) == 1  # type: ignore[arg-type]
    assert [subject for subject, _, _ in working.stored] == ["eru.deploy.d1.planned"]


async def test_the_publisher_marks_what_was_acked_and_hands_back_what_failed() -> None:
    store = InMemoryStore()
    acked, failed = [_event("d1", "planned")], [_event("d2", "planned")]
    for message in acked + failed:  # inserted held for this process, as a batch's rows are
        store.queue_outbox(message.envelope.id, message.subject, b"", {}, held_seconds=30.0)
    publisher = CommittedPublisher(store, FakeJetStream(), None)  # type: ignore[arg-type]
    await publisher.publish(acked, {})
    await publisher.close()
    assert publisher.published == 1
    broken = CommittedPublisher(store, FakeJetStream(failing=True), None)  # type: ignore[arg-type]
    await broken.publish(failed, {})
    await broken.close()
    assert broken.released == 1
    async with store.claim(10, tenants=False) as claimed:  # the failed row is the relays' at once
        assert [m.event_id for m in claimed.messages] == [failed[0].envelope.id]
    store.now += 60.0  # past the hold: the acked row was marked, no relay publishes it again
    async with store.claim(10, tenants=False) as claimed:
        assert list(claimed.messages) == []


async def test_a_settled_operation_answers_its_first_reply_without_running_again() -> None:
    store = InMemoryStore()
    envelope = new_envelope("eru.allocator.remove", "client")
    runs: list[int] = []

    async def run() -> OperationReply:
        runs.append(1)
        return OperationReply(message=f"removed (run {len(runs)})")

    first = await at_most_once(store, "remove", envelope, run)
    again = await at_most_once(store, "remove", envelope, run)
    assert runs == [1]
    assert again == first
    other = await at_most_once(store, "remove", new_envelope("eru.allocator.remove", "client"), run)
    assert other.message == "removed (run 2)"


@dataclass
class Metadata:
    stream: str = "ERU_DLQ"
    consumer: str = "allocator-dead-letters"
    num_delivered: int = 1
    num_pending: int = 0
    timestamp: Any = None
    sequence: Any = field(default_factory=lambda: type("Seq", (), {"stream": 7})())


@dataclass
class Letter:
    """A dead letter of ERU_DLQ as the recorder reads it."""

    subject: str
    data: bytes
    headers: dict[str, str]
    metadata: Metadata = field(default_factory=Metadata)
    outcome: list[str] = field(default_factory=list)

    async def ack(self) -> None:
        self.outcome.append("ack")

    async def nak(self, delay: float | None = None) -> None:
        self.outcome.append("nak")


def _letter(request_id: str) -> Letter:
    request = DeployRequest.model_validate(
        {"request_id": request_id, "pod": POD, "count": 1, "workload": {"name": "w", "image": "busybox"}}
    )
    envelope = new_envelope("eru.deploy.request", "client")
    headers = {**envelope.to_headers(), H_CONTENT_TYPE: MSGPACK, H_SUBJECT: "eru.deploy.request", H_REASON: "boom"}
    return Letter("eru.dlq.eru.deploy.request", encode(request), headers)


class AwayStore(InMemoryStore):
    """The store unreachable while `away`."""

    away = True

    async def record_dead_letter(self, key: str, reason: str, message_id: str) -> None:
        if self.away:
            raise StoreUnavailable("postgres is restarting")
        await super().record_dead_letter(key, reason, message_id)


async def test_the_recorder_settles_a_deploys_dead_letter_and_naks_while_the_store_is_away() -> None:
    store = AwayStore()
    recorder = dead_letter_recorder(None, store, asyncio.Event(), "allocator/test")  # type: ignore[arg-type]
    letter = _letter("r-1")
    await recorder._handle(letter)
    assert letter.outcome == ["nak"]
    assert await store.settled_request("r-1") is None
    store.away = False
    await recorder._handle(letter)
    assert letter.outcome == ["nak", "ack"]
    settled = await store.settled_request("r-1")
    assert settled is not None
    assert (settled.outcome, settled.reason, settled.message_id) == ("dead_lettered", "boom", letter.headers["ce-id"])
