"""The kept instances capability (`eru.store.kept.KeptInstanceStore`) on PostgreSQL: a round is one transaction over
`pool` under `pg_try_advisory_xact_lock(hashtext('eru-keeper'))`, its statements in `store.kept_instances`, its
messages queued in the outbox (`store.outbox`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import asyncpg

from eru.store import transaction
from eru.store.kept import DueInstance, GoneInstance, KeeperRound, KeptInstanceStore, PlacingInstance
from eru.store.protocol import OutboxMessage
from eru.store.transaction import Connection
from eru_allocator.store import kept_instances as kept
from eru_allocator.store.outbox import queue_many


class PgKeeperRound:
    """A round's transaction (see `eru.store.kept.KeeperRound`)."""

    def __init__(self, conn: Connection, now: float) -> None:
        self.conn = conn
        self._now = now

    @property
    def now(self) -> float:
        """The transaction's time (epoch seconds)."""
        return self._now

    async def record_evictions(self, mark: str, within_seconds: float) -> None:
        """Evictions recorded from the containers removed with `mark`."""
        await kept.record_evictions(self.conn, mark, within_seconds)

    async def adopt(self) -> None:
        """First instances of `keep` deploys kept."""
        await kept.adopt(self.conn)

    async def gone(self) -> list[GoneInstance]:
        """Running kept instances whose container is gone, locked."""
        return await kept.gone(self.conn)

    async def due(self, now: float) -> list[DueInstance]:
        """Waiting kept instances due by `now`, locked."""
        return await kept.due(self.conn, now)

    async def placing(self) -> list[PlacingInstance]:
        """Kept instances being placed, locked."""
        return await kept.placing(self.conn)

    async def move(
        self,
        lineage: str,
        state: str,
        due_at: float | None,
        evictions: Sequence[float],
        *,
        container_id: str | None = None,
        request_id: str | None = None,
        next_generation: bool = False,
    ) -> None:
        """A kept instance moved on."""
        await kept.move(
            self.conn,
            lineage,
            state,
            due_at,
            evictions,
            container_id=container_id,
            request_id=request_id,
            next_generation=next_generation,
        )

    async def queue(self, messages: Sequence[OutboxMessage]) -> None:
        """The round's messages in the outbox."""
        await queue_many(self.conn, [(m.subject, m.message, m.envelope) for m in messages])


class PgKeptInstances:
    """`KeptInstanceStore` over `pool`."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    @asynccontextmanager
    async def keeper_round(self) -> AsyncIterator[PgKeeperRound | None]:
        """One transaction; None when another replica holds the keeper's lock."""
        async with transaction(self.pool) as conn:
            if not await kept.try_lock_keeper(conn):
                yield None
                return
            yield PgKeeperRound(conn, await kept.database_now(conn))


def _conforms(store: PgKeptInstances, round_: PgKeeperRound) -> tuple[KeptInstanceStore, KeeperRound]:
    """Where mypy checks that these are a `KeptInstanceStore` and a `KeeperRound`."""
    return store, round_
