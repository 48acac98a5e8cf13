"""The container events capability (`eru.store.container_events.ContainerEventStore`) on PostgreSQL: a batch is one
transaction over `pool` that opens with `eru_open_event_batch` (marks, locks, reads: `store.container_events`) and
writes with one statement plus the node usage (`sql.change_usages`, node rows locked in name order after deploys and
containers: the lock order of docs/store.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import asyncpg

from eru.store import transaction
from eru.store.container_events import (
    ContainerEventStore,
    EventBatchWrite,
    HealthReport,
    OpenedEventBatch,
    OverdueContainer,
    SilentContainer,
)
from eru.store.transaction import Connection
from eru_allocator.store import sql
from eru_allocator.store.container_events import open_event_batch, overdue, write_event_batch
from eru_allocator.store.containers import on_silent_nodes, record_health


class PgEventBatch:
    """An open events batch: its transaction's connection and what opening it read."""

    def __init__(self, conn: Connection, opened: OpenedEventBatch) -> None:
        self.conn = conn
        self._opened = opened

    @property
    def opened(self) -> OpenedEventBatch:
        """What opening the batch read."""
        return self._opened

    async def write(self, changes: EventBatchWrite) -> set[str]:
        """The rows, finished deploys and outbox in one statement, then the node usage; the outbox ids inserted."""
        queued = await write_event_batch(
            self.conn, changes.moved, changes.reshaped, changes.finished, changes.messages, changes.hold
        )
        await sql.change_usages(self.conn, changes.usage, 1)
        return queued


class PgContainerEvents:
    """`ContainerEventStore` over `pool` (see the module doc)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    @asynccontextmanager
    async def event_batch(
        self, inbox: str, messages: Sequence[str], containers: Sequence[tuple[str, str]]
    ) -> AsyncIterator[PgEventBatch]:
        """One transaction: opened by `eru_open_event_batch`, committed when the block ends normally."""
        async with transaction(self.pool) as conn:
            yield PgEventBatch(conn, await open_event_batch(conn, inbox, messages, containers))

    async def overdue(self, timeout_seconds: float) -> list[OverdueContainer]:
        """Containers planned or creating unchanged for `timeout_seconds`, by id."""
        return await overdue(self.pool, timeout_seconds)

    async def on_silent_nodes(self, ttl_seconds: float) -> list[SilentContainer]:
        """Live, acknowledged containers of nodes silent for `ttl_seconds`, by id."""
        return await on_silent_nodes(self.pool, ttl_seconds)

    async def record_health(self, reports: Sequence[HealthReport]) -> None:
        """One statement onto the live containers' rows."""
        await record_health(self.pool, reports)


def _conforms(store: PgContainerEvents) -> ContainerEventStore:
    """Where mypy checks that `PgContainerEvents` is a `ContainerEventStore`."""
    return store
