"""The delivery capability of the allocator's store (docs/store.md "Capabilities beyond the deploy path"): the
outbox's relay side (claims of committed rows, rows the committing process published marked or released, the wake-up
on every commit), settled requests (an operation's first answer, a deploy's dead letter recorded and forgotten) and
the housekeeping sweep's prune round and retention pass. Implemented by PostgreSQL
(`eru_allocator.store.delivery_store.PgDelivery`) and in memory (`eru.testing.memory_delivery`); the contract suite
(tests/integration/store/test_delivery_contract.py) runs the same cases against both.

Messages are queued by the units of work that cause them (`eru_allocator.store.outbox.queue`, `PodWrites.messages`,
an events batch's write), never through this capability: it only hands committed rows on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Protocol

from eru.store.settled_retention import SettleWindows
from eru.store.transaction import OutboxMessage


@dataclass(frozen=True)
class OutboxClaim:
    """Committed outbox rows claimed for one relay burst, oldest first (`OutboxMessage`: row id, event id, subject,
    headers, body, when queued), and, when asked, the tenant of each claimed deploy event's deploy (a group's
    events: its parent tenant's), by deploy id."""

    messages: Sequence[OutboxMessage]
    tenants: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SettledRequest:
    """What a request key was settled as outside a deploy row: `accepted` (an operation's first answer in `reason`,
    JSON text) or `dead_lettered` (why, and the id of the message that was dead-lettered)."""

    request_id: str
    kind: str
    outcome: str
    reason: str | None
    message_id: str | None


@dataclass(frozen=True)
class Pruned:
    """What one prune round forgot: relayed outbox rows and inbox marks."""

    outbox: int
    inbox: int


@dataclass(frozen=True)
class RetentionPass:
    """What one retention pass did (docs/store.md "Retention"): rows moved to history per live table, the partitions
    dropped (by name), those whose drop found their table busy (tried again next pass), and whether it ran at all
    (False: another process held the pass)."""

    moved: dict[str, int]
    dropped: list[str]
    busy: list[str]
    ran: bool


class OutboxRelayStore(Protocol):
    """The relay's side of the transactional outbox (docs/pipeline.md "The outbox")."""

    def claim(self, batch: int, *, tenants: bool) -> AbstractAsyncContextManager[OutboxClaim]:
        """A block holding up to `batch` committed rows nobody holds (oldest first; a row held for the process that
        committed it waits for its hold to pass). The rows count as published when the block ends normally and
        are claimable again when it raises (publish them inside it). Claims running at the same time get
        disjoint rows (PostgreSQL: `FOR UPDATE SKIP LOCKED`), so every replica relays in parallel."""

    def outbox_wakes(self) -> AbstractAsyncContextManager[asyncio.Event]:
        """For the block, an event set on every commit that queued rows (PostgreSQL: `LISTEN eru_outbox` on a
        connection of its own); the holder clears it before it looks."""

    async def mark_published(self, event_ids: Sequence[str]) -> None:
        """Mark the unpublished rows of `event_ids` published (by the process that committed them: docs/store.md
        "Publishing after the commit"); rows a relay published meanwhile stay as they are."""

    async def release_held(self, event_ids: Sequence[str]) -> None:
        """End the hold of `event_ids`' unpublished rows and wake the relays: they claim them at once."""


class SettledStore(Protocol):
    """Settled requests (docs/store.md "Settled requests")."""

    async def operation_answer(self, key: str) -> str | None:
        """The first answer (JSON text) an operation settled under `key` gave; None when it never ran."""

    async def record_operation(self, key: str, operation: str, answer: str) -> None:
        """Keep `answer` as the answer of `operation` under `key`; the first one recorded wins."""

    async def record_dead_letter(self, key: str, reason: str, message_id: str) -> None:
        """Settle deploy request `key` as dead-lettered by message `message_id`: it replaces the key's earlier dead
        letter; a key already accepted keeps its accepted row (that answer wins)."""

    async def forget_dead_letter(self, key: str) -> None:
        """Drop `key`'s dead letter: a redriven request may deploy now (an accepted row stays)."""

    async def settled_request(self, key: str) -> SettledRequest | None:
        """What `key` was settled as: the accepted row first, then the newest; None when never settled."""


class PruneStore(Protocol):
    """The housekeeping sweep's round (docs/store.md "Retention")."""

    async def prune(self, windows: SettleWindows, outbox_keep_seconds: float, inbox_keep_seconds: float) -> Pruned:
        """In one unit of work: store the settle `windows` every later settle uses, forget outbox rows published
        more than `outbox_keep_seconds` ago and inbox marks older than `inbox_keep_seconds`."""

    async def retention_pass(self, retention_seconds: float) -> RetentionPass:
        """Move finished rows to history, add partitions ahead, drop those past `retention_seconds`; one process at
        a time (the others' pass does not run)."""


class DeliveryStore(OutboxRelayStore, SettledStore, PruneStore, Protocol):
    """Everything the delivery package and the sweep's prune round ask of the store."""


__all__ = [
    "DeliveryStore",
    "OutboxClaim",
    "OutboxRelayStore",
    "PruneStore",
    "Pruned",
    "RetentionPass",
    "SettledRequest",
    "SettledStore",
]
