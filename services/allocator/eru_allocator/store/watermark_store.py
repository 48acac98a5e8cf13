"""The watermark overrides capability (`eru.store.watermarks.WatermarkStore`) on PostgreSQL: a change is one
transaction (the override's pod found, its lock taken, the override row locked, the layers read, the new override
upserted with its next version and the message queued in the outbox); statements in `store.watermark_overrides`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import asyncpg

from eru.store import lock_pod, transaction
from eru.store.protocol import OutboxMessage
from eru.store.watermarks import OverrideLayers, StoredOverride, WatermarkStore
from eru_allocator.store import watermark_overrides as rows
from eru_allocator.store.outbox import queue


class PgWatermarks:
    """`WatermarkStore` over `pool` (see the module doc)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def change_override(
        self,
        scope: str,
        name: str,
        change: Callable[[OverrideLayers], Mapping[str, int]],
        message: Callable[[StoredOverride], OutboxMessage],
    ) -> StoredOverride | None:
        """One transaction under the pod's lock; rolled back when `change` or `message` raises."""
        async with transaction(self.pool) as conn:
            pod = await rows.pod_of(conn, scope, name)
            if pod is None:
                return None
            await lock_pod(conn, pod)
            current = await rows.override(conn, scope, name, lock=True)
            if scope == "node":
                layers = OverrideLayers(pod, current, pod_override=await rows.override(conn, "pod", pod))
            else:
                layers = OverrideLayers(pod, current, node_overrides=await rows.pod_node_overrides(conn, pod))
            new = dict(change(layers))
            version = await rows.put_override(conn, scope, name, new)
            stored = StoredOverride(scope, name, new, version)
            outgoing = message(stored)
            await queue(conn, outgoing.subject, outgoing.message, outgoing.envelope)
        return stored

    async def overrides(self) -> list[StoredOverride]:
        """One statement."""
        async with self.pool.acquire() as conn:
            return await rows.all_overrides(conn)


def _conforms(store: PgWatermarks) -> WatermarkStore:
    """Where mypy checks that `PgWatermarks` is a `WatermarkStore`."""
    return store
