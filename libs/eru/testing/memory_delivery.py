"""The delivery capability (`eru.store.delivery.DeliveryStore`) in memory, mixed into `InMemoryStore`
(eru.testing.memory_store): the same answers as PostgreSQL's `PgDelivery` (the contract suite,
tests/integration/store/test_delivery_contract.py, runs both).

Outbox rows are numbered in the order they were queued: the messages the store's units of work queued (`outbox`:
`PodWrites.messages`, an events batch's, a keeper round's) become rows at the next claim, encoded as
`eru_allocator.store.outbox.queue` encodes them; `queue_outbox` adds one directly (held, as a committing process
inserts its rows, when asked). A claim holds its rows for its block (claims at the same time get disjoint rows) and
marks them published when the block ends normally. Times are the store's clock (`now`). A deploy stored in `deploys`
counts as settled `accepted` under its request id, as PostgreSQL's `deploys_settle` trigger records it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from eru.bus import encode
from eru.bus.codec import MSGPACK
from eru.bus.envelope import H_CONTENT_TYPE
from eru.fairness.ledger import parent_of
from eru.store.delivery import DeliveryStore, OutboxClaim, Pruned, RetentionPass, SettledRequest
from eru.store.protocol import DeployRow
from eru.store.protocol import OutboxMessage as QueuedMessage
from eru.store.settled_retention import SettleWindows
from eru.store.transaction import OutboxMessage
from eru.testing.memory_containers import MemoryContainerEvents


@dataclass
class MemoryOutboxRow:
    """One outbox row: the message, when it was queued, published (None: not yet) and held until."""

    message: OutboxMessage
    queued_at: float
    published_at: float | None = None
    held_until: float | None = None


@dataclass
class MemorySettledRow:
    """One `settled_requests` row; `order` is the order rows were settled in (newest highest)."""

    request_id: str
    kind: str
    outcome: str
    reason: str | None
    message_id: str | None
    order: int


@dataclass
class MemoryDeliveryState:
    """What the delivery capability keeps beside the store's rows."""

    rows: list[MemoryOutboxRow] = field(default_factory=list)
    next_id: int = 1
    taken: int = 0
    """How many of the store's queued messages (`outbox`) are rows already."""
    claimed: set[int] = field(default_factory=set)
    """Row ids held by a claim's block."""
    wakes: list[asyncio.Event] = field(default_factory=list)
    settled: list[MemorySettledRow] = field(default_factory=list)
    inbox_at: dict[tuple[str, str], float] = field(default_factory=dict)
    """(consumer, message id) → when the inbox mark was made (first seen by a prune when the mark came another way)."""
    windows: SettleWindows | None = None
    settles: int = 0


def _deploy_id(subject: str) -> str | None:
    parts = subject.split(".")
    return parts[2] if len(parts) == 4 and parts[0] == "eru" and parts[1] == "deploy" else None


class MemoryDelivery(MemoryContainerEvents):
    """`DeliveryStore` over the store's `outbox` and `deploys` (see the module doc)."""

    now: float
    outbox: list[QueuedMessage]
    deploys: dict[str, DeployRow]

    @property
    def delivery_state(self) -> MemoryDeliveryState:
        """The capability's own state, made on first use."""
        state = self.__dict__.get("_delivery_state")
        if state is None:
            state = self.__dict__["_delivery_state"] = MemoryDeliveryState()
        assert isinstance(state, MemoryDeliveryState)
        return state

    # ------------------------------------------------------------------------------------------------ filling
    def queue_outbox(
        self, event_id: str, subject: str, body: bytes, headers: Mapping[str, str], *, held_seconds: float | None = None
    ) -> bool:
        """Queue one committed row (held for `held_seconds` when given); False when `event_id` is queued already.
        Only a row that is not held wakes the relays."""
        self._take_queued()
        state = self.delivery_state
        if any(row.message.event_id == event_id for row in state.rows):
            return False
        self._add_row(event_id, subject, body, headers, held_seconds)
        if held_seconds is None:
            self._wake()
        return True

    def mark_inbox(self, consumer: str, message_id: str) -> None:
        """`consumer` processed `message_id` now (its inbox mark)."""
        self.event_state.inbox.setdefault(consumer, set()).add(message_id)
        self.delivery_state.inbox_at[(consumer, message_id)] = self.now

    def _add_row(
        self, event_id: str, subject: str, body: bytes, headers: Mapping[str, str], held_seconds: float | None
    ) -> None:
        state = self.delivery_state
        created = datetime.fromtimestamp(self.now, UTC)
        message = OutboxMessage(state.next_id, event_id, subject, dict(headers), body, created)
        held = None if held_seconds is None else self.now + held_seconds
        state.next_id += 1
        state.rows.append(MemoryOutboxRow(message, self.now, held_until=held))

    def _take_queued(self) -> None:
        """The store's queued messages not yet rows, as rows (a repeated event id is dropped, as ON CONFLICT)."""
        state = self.delivery_state
        known = {row.message.event_id for row in state.rows}
        for subject, model, envelope in self.outbox[state.taken :]:
            if envelope.id not in known:
                known.add(envelope.id)
                headers = {**envelope.to_headers(), H_CONTENT_TYPE: MSGPACK}
                self._add_row(envelope.id, subject, encode(model), headers, None)
        state.taken = len(self.outbox)

    def _wake(self) -> None:
        for wake in self.delivery_state.wakes:
            wake.set()

    # ------------------------------------------------------------------------------------------------- outbox
    @asynccontextmanager
    async def claim(self, batch: int, *, tenants: bool) -> AsyncIterator[OutboxClaim]:
        """Up to `batch` unpublished rows not held and not claimed, oldest first, published when the block ends."""
        self._take_queued()
        state, now = self.delivery_state, self.now
        rows = [
            row
            for row in state.rows
            if row.published_at is None
            and (row.held_until is None or row.held_until <= now)
            and row.message.id not in state.claimed
        ][: max(batch, 0)]
        ids = {row.message.id for row in rows}
        owners: dict[str, str] = {}
        if tenants:
            by_id = {row.message.id: _deploy_id(row.message.subject) for row in rows}
            for deploy_id in by_id.values():
                deploy = self.deploys.get(deploy_id or "")
                if deploy_id is not None and deploy is not None:
                    owners[deploy_id] = parent_of(deploy.tenant)
        state.claimed |= ids
        try:
            yield OutboxClaim([row.message for row in rows], owners)
            for row in rows:
                row.published_at = self.now
        finally:
            state.claimed -= ids

    @asynccontextmanager
    async def outbox_wakes(self) -> AsyncIterator[asyncio.Event]:
        """An event set whenever a row that is not held is queued or released."""
        wake = asyncio.Event()
        self.delivery_state.wakes.append(wake)
        try:
            yield wake
        finally:
            self.delivery_state.wakes.remove(wake)

    async def mark_published(self, event_ids: Sequence[str]) -> None:
        """The unpublished rows of `event_ids` published now, their holds ended."""
        wanted = set(event_ids)
        for row in self.delivery_state.rows:
            if row.message.event_id in wanted and row.published_at is None:
                row.published_at, row.held_until = self.now, None

    async def release_held(self, event_ids: Sequence[str]) -> None:
        """The holds of `event_ids`' unpublished rows ended; the relays woken."""
        wanted = set(event_ids)
        for row in self.delivery_state.rows:
            if row.message.event_id in wanted and row.published_at is None:
                row.held_until = None
        self._wake()

    # ------------------------------------------------------------------------------------------------ settled
    def _settled_rows(self, key: str) -> list[MemorySettledRow]:
        rows = [row for row in self.delivery_state.settled if row.request_id == key]
        deployed = [deploy for deploy in self.deploys.values() if deploy.request_id == key]
        rows += [MemorySettledRow(key, "deploy", "accepted", None, None, -1) for _ in deployed[:1]]
        return sorted(rows, key=lambda row: (row.outcome == "accepted", row.order), reverse=True)

    def _settle(self, key: str, kind: str, outcome: str, reason: str | None, message_id: str | None) -> None:
        state = self.delivery_state
        state.settles += 1
        state.settled.append(MemorySettledRow(key, kind, outcome, reason, message_id, state.settles))

    async def operation_answer(self, key: str) -> str | None:
        """The first accepted row's answer."""
        accepted = [row for row in self.delivery_state.settled if row.request_id == key and row.outcome == "accepted"]
        return min(accepted, key=lambda row: row.order).reason if accepted else None

    async def record_operation(self, key: str, operation: str, answer: str) -> None:
        """An accepted row unless `key` has one."""
        if not any(row.outcome == "accepted" for row in self._settled_rows(key)):
            self._settle(key, operation, "accepted", answer, None)

    async def record_dead_letter(self, key: str, reason: str, message_id: str) -> None:
        """The key's earlier dead letter replaced; nothing when it was accepted."""
        await self.forget_dead_letter(key)
        if not any(row.outcome == "accepted" for row in self._settled_rows(key)):
            self._settle(key, "deploy", "dead_lettered", reason, message_id)

    async def forget_dead_letter(self, key: str) -> None:
        """The key's dead-letter rows dropped."""
        state = self.delivery_state
        state.settled = [r for r in state.settled if not (r.request_id == key and r.outcome == "dead_lettered")]

    async def settled_request(self, key: str) -> SettledRequest | None:
        """The accepted row first, then the newest."""
        rows = self._settled_rows(key)
        if not rows:
            return None
        row = rows[0]
        return SettledRequest(row.request_id, row.kind, row.outcome, row.reason, row.message_id)

    # -------------------------------------------------------------------------------------------------- prune
    async def prune(self, windows: SettleWindows, outbox_keep_seconds: float, inbox_keep_seconds: float) -> Pruned:
        """The windows kept; rows published and inbox marks made more than their keep ago forgotten."""
        state, now = self.delivery_state, self.now
        state.windows = windows
        kept = [row for row in state.rows if row.published_at is None or row.published_at >= now - outbox_keep_seconds]
        relayed = len(state.rows) - len(kept)
        state.rows = kept
        marks = 0
        for consumer, seen in self.event_state.inbox.items():
            for message_id in list(seen):
                at = state.inbox_at.setdefault((consumer, message_id), now)
                if at < now - inbox_keep_seconds:
                    seen.discard(message_id)
                    del state.inbox_at[(consumer, message_id)]
                    marks += 1
        return Pruned(relayed, marks)

    async def retention_pass(self, retention_seconds: float) -> RetentionPass:
        """Nothing moved or dropped: the fake keeps no history (the pass runs)."""
        return RetentionPass({}, [], [], True)


def _conforms(store: MemoryDelivery) -> DeliveryStore:
    """Where mypy checks that `MemoryDelivery` is a `DeliveryStore`."""
    return store


__all__ = ["MemoryDelivery", "MemoryDeliveryState", "MemoryOutboxRow", "MemorySettledRow"]
