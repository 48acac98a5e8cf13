"""The delivery capability (`eru.store.delivery.DeliveryStore`) on PostgreSQL: the relay's claim of committed outbox
rows (`FOR UPDATE SKIP LOCKED`, statement in `store.outbox`) held for one transaction, `LISTEN eru_outbox` on a
connection of its own, the committing process's marks and releases, settled requests (`store.settled`) and the
sweep's prune round (`eru.store`'s `prune_outbox`, `prune_inbox`, `settled_retention.write_windows`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import asyncpg

from eru.store import OUTBOX_CHANNEL, prune_inbox, prune_outbox, transaction
from eru.store.delivery import DeliveryStore, OutboxClaim, Pruned, RetentionPass, SettledRequest
from eru.store.retention import collect
from eru.store.settled_retention import SettleWindows, write_windows
from eru_allocator.store import outbox, settled


class PgDelivery:
    """`DeliveryStore` over `pool` (see the module doc)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    @asynccontextmanager
    async def claim(self, batch: int, *, tenants: bool) -> AsyncIterator[OutboxClaim]:
        """One transaction: BEGIN, the claim (and the deploys' tenants) in one statement, the block, COMMIT."""
        async with transaction(self.pool) as conn:
            messages, owners = await outbox.claim(conn, batch, tenants=tenants)
            yield OutboxClaim(messages, owners)

    @asynccontextmanager
    async def outbox_wakes(self) -> AsyncIterator[asyncio.Event]:
        """A pooled connection listening on `eru_outbox` for the block; the event is set on every NOTIFY."""
        wake = asyncio.Event()

        def on_notify(*_args: object) -> None:
            wake.set()

        listener = await self.pool.acquire()
        try:
            await listener.add_listener(OUTBOX_CHANNEL, on_notify)
            yield wake
        finally:
            with contextlib.suppress(Exception):
                await listener.remove_listener(OUTBOX_CHANNEL, on_notify)
            await self.pool.release(listener)

    async def mark_published(self, event_ids: Sequence[str]) -> None:
        """One statement for every id."""
        await outbox.mark_published(self.pool, event_ids)

    async def release_held(self, event_ids: Sequence[str]) -> None:
        """One statement: the holds ended and the relays woken (pg_notify)."""
        await outbox.release_held(self.pool, event_ids)

    async def operation_answer(self, key: str) -> str | None:
        """The first accepted row's answer."""
        return await settled.operation_answer(self.pool, key)

    async def record_operation(self, key: str, operation: str, answer: str) -> None:
        """An accepted row unless one exists."""
        await settled.record_operation(self.pool, key, operation, answer)

    async def record_dead_letter(self, key: str, reason: str, message_id: str) -> None:
        """The earlier dead letter replaced, an accepted row kept (and kept longer)."""
        await settled.record_dead_letter(self.pool, key, reason, message_id)

    async def forget_dead_letter(self, key: str) -> None:
        """The key's dead-letter rows deleted."""
        await settled.forget_dead_letter(self.pool, key)

    async def settled_request(self, key: str) -> SettledRequest | None:
        """The accepted row first, then the newest."""
        return await settled.settled_request(self.pool, key)

    async def retention_pass(self, retention_seconds: float) -> RetentionPass:
        """`eru.store.retention.collect` on the pool (its own statements, under the retention lock)."""
        report = await collect(self.pool, retention_seconds)
        dropped = [str(drop["partition"]) for drop in report.dropped]
        return RetentionPass(dict(report.moved), dropped, list(report.skipped), report.ran)

    async def prune(self, windows: SettleWindows, outbox_keep_seconds: float, inbox_keep_seconds: float) -> Pruned:
        """One transaction: the windows written, relayed rows and old inbox marks deleted."""
        async with transaction(self.pool) as conn:
            # how long request ids are remembered follows the streams' ages (eru.store.settled_retention)
            await write_windows(conn, windows)
            relayed = await prune_outbox(conn, outbox_keep_seconds)
            marks = await prune_inbox(conn, inbox_keep_seconds)
        return Pruned(relayed, marks)


def _conforms(store: PgDelivery) -> DeliveryStore:
    """Where mypy checks that `PgDelivery` is a `DeliveryStore`."""
    return store
