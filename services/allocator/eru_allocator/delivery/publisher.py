"""Publishing a transaction's outbox rows from the process that committed them (docs/store.md "Publishing after the
commit").

Through the relay (`outbox.run_relay`) a committed row waits for the NOTIFY to reach the relay, then for the relay's
own transaction (BEGIN, claim, publish): a deploy batch's node commands and `planned` events, and an events batch's
`completed` events, paid two more PostgreSQL round trips and a wake-up on the way to the node agent and the client.
A batch that publishes its own rows inserts them *held* (`held_until` = `hold_seconds` ahead: the relays skip them
and are not woken) and hands them to `CommittedPublisher.publish` right after its COMMIT:

1. every message is published in order, with `Nats-Msg-Id` = its event id as the relay sends it (the publishes are
   queued on the connection in one go; the caller does not wait for the acks);
2. in the background: once JetStream has acked every message, the tenants' copies of deploy events go out (core
   NATS, as the relay sends them) and the event ids are marked published — many batches' marks in one statement
   every `mark_seconds`;
3. a publish that fails releases its rows' hold (and wakes the relays): a relay publishes them at once.

If the process dies between its COMMIT and the mark, the rows stay held until `hold_seconds` have passed and a relay
publishes them then; JetStream drops what was already stored (its duplicate window is 120 s, far longer than the
hold). Nothing is lost and nothing is stored twice. The marks and releases go through the store's delivery capability
(`eru.store.delivery.OutboxRelayStore`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence

import structlog
from nats.js.api import PubAck
from nats.js.client import JetStreamContext

from eru.bus import encode
from eru.bus.codec import MSGPACK
from eru.bus.envelope import H_CONTENT_TYPE, H_MSG_ID
from eru.bus.protocol import Bus
from eru.bus.subjects import tenant_deploy_event
from eru.fairness.ledger import parent_of
from eru.store.delivery import OutboxRelayStore
from eru.store.protocol import OutboxMessage

log = structlog.get_logger()

PUBLISH_TIMEOUT_SECONDS = 10.0


def _deploy_of(subject: str) -> tuple[str, str] | None:
    """(deploy id, event) of a deploy event subject `eru.deploy.<id>.<event>`, None for any other subject."""
    parts = subject.split(".")
    if len(parts) == 4 and parts[0] == "eru" and parts[1] == "deploy":
        return parts[2], parts[3]
    return None


class CommittedPublisher:
    """Publishes committed outbox rows that were inserted held for this process (see the module docstring)."""

    def __init__(
        self,
        store: OutboxRelayStore,
        js: JetStreamContext,
        bus: Bus | None = None,
        *,
        hold_seconds: float = 30.0,
        mark_seconds: float = 0.2,
    ) -> None:
        self.store = store
        self.js = js
        self.bus = bus
        self.hold_seconds = hold_seconds
        self.mark_seconds = mark_seconds
        self._marks: list[str] = []
        self._marked = asyncio.Event()  # set when marks are waiting
        self._settling: set[asyncio.Task[None]] = set()
        self.published = 0  # messages acked by JetStream
        self.released = 0  # messages handed back to the relays after a failed publish

    async def publish(self, messages: Sequence[OutboxMessage], tenants: Mapping[str, str | None]) -> None:
        """Publish a committed transaction's held rows (`messages` in their outbox order); `tenants`: each deploy's
        tenant, for the copies of its events. Returns once every publish is queued on the connection; the acks, the
        tenants' copies and the marks follow in the background."""
        if not messages:
            return
        event_ids = [message.envelope.id for message in messages]
        acks: list[asyncio.Future[PubAck]] = []
        copies: list[tuple[str, bytes, dict[str, str]]] = []
        try:
            for subject, model, envelope in messages:
                body = encode(model)
                headers = {**envelope.to_headers(), H_CONTENT_TYPE: MSGPACK}
                acks.append(await self.js.publish_async(subject, body, headers={**headers, H_MSG_ID: envelope.id}))
                copies += self._copies(subject, tenants, body, headers)
        except Exception as error:  # not even queued: the relays take them
            for ack in acks:
                ack.cancel()
            await self._release(event_ids, error)
            return
        task = asyncio.create_task(self._settle(event_ids, acks, copies))
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    @staticmethod
    def _copies(
        subject: str, tenants: Mapping[str, str | None], body: bytes, headers: dict[str, str]
    ) -> list[tuple[str, bytes, dict[str, str]]]:
        """The tenant's copy of a deploy event, `eru.t.<tenant>.deploy.<id>.<event>` (docs/security.md), as the
        relay sends it; none for other subjects or a deploy without a tenant."""
        deployed = _deploy_of(subject)
        if deployed is None:
            return []
        deploy_id, event = deployed
        tenant = tenants.get(deploy_id)
        if tenant is None:
            return []
        try:
            return [(tenant_deploy_event(parent_of(tenant), deploy_id, event), body, headers)]
        except Exception:  # a tenant name that is no subject token has no watchers
            return []

    async def _settle(
        self, event_ids: list[str], acks: list[asyncio.Future[PubAck]], copies: list[tuple[str, bytes, dict[str, str]]]
    ) -> None:
        try:
            await asyncio.wait_for(asyncio.gather(*acks), timeout=PUBLISH_TIMEOUT_SECONDS)
        except Exception as error:
            await self._release(event_ids, error)
            return
        self.published += len(event_ids)
        self._marks += event_ids
        self._marked.set()
        if self.bus is not None:
            for subject, body, headers in copies:
                with contextlib.suppress(Exception):  # a copy for watchers: the stored event is the record
                    await self.bus.publish(subject, body, headers=headers)

    async def _release(self, event_ids: list[str], error: BaseException) -> None:
        log.warning("outbox.publish_failed", messages=len(event_ids), error=f"{type(error).__name__}: {error}")
        self.released += len(event_ids)
        with contextlib.suppress(Exception):  # unreachable store: the hold runs out and a relay publishes them
            await self.store.release_held(event_ids)

    async def mark(self) -> int:
        """Mark the acked rows published now (one statement); returns how many ids it marked. Failed marks are kept
        for the next call (until then the hold keeps the relays away; after it, a relay republishes and JetStream
        drops the duplicate)."""
        marks, self._marks = self._marks, []
        self._marked.clear()
        if not marks:
            return 0
        try:
            await self.store.mark_published(marks)
        except Exception as error:
            log.warning("outbox.mark_failed", messages=len(marks), error=f"{type(error).__name__}: {error}")
            self._marks = marks + self._marks
            return 0
        return len(marks)

    async def run(self, stopping: asyncio.Event) -> None:
        """Mark what was acked, at most every `mark_seconds`, until `stopping`; then `close`."""
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._marked.wait(), timeout=1.0)
            if self._marks:
                with contextlib.suppress(TimeoutError):  # gather more batches' marks into the statement
                    await asyncio.wait_for(stopping.wait(), timeout=self.mark_seconds)
                await self.mark()
        await self.close()

    async def close(self) -> None:
        """Wait for the publishes in flight to be acked (or released), then mark them."""
        if self._settling:
            await asyncio.gather(*self._settling, return_exceptions=True)
        await self.mark()


__all__ = ["CommittedPublisher"]
