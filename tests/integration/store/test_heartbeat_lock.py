"""A heartbeat never queues behind a deploy holding its node's row while the node's last beat is recent (the soak's
> 1 s `UPDATE nodes SET heartbeat_at` lock waits, docs/store.md "Row lock order"); a stale beat still waits."""

from __future__ import annotations

import asyncio
import time

import asyncpg

from eru.domain.messages import Heartbeat
from eru_allocator.nodes import heartbeat


async def _node(pool: asyncpg.Pool, beat_age_seconds: float) -> None:
    await pool.execute("INSERT INTO pods (name) VALUES ('hb') ON CONFLICT DO NOTHING")
    await pool.execute(
        """INSERT INTO nodes (name, pod, memory, heartbeat_at)
           VALUES ('hb1', 'hb', 0, now() - make_interval(secs => $1))
           ON CONFLICT (name) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at""",
        beat_age_seconds,
    )


async def test_a_busy_row_with_a_recent_beat_is_skipped_and_a_stale_one_waits(store_pool: asyncpg.Pool) -> None:
    beat = Heartbeat(node="hb1", containers=[])
    assert await heartbeat(store_pool, Heartbeat(node="nobody", containers=[])) is False
    await _node(store_pool, beat_age_seconds=2)
    before = await store_pool.fetchval("SELECT heartbeat_at FROM nodes WHERE name = 'hb1'")
    async with store_pool.acquire() as deploy:
        held = deploy.transaction()
        await held.start()
        await deploy.execute("SELECT 1 FROM nodes WHERE name = 'hb1' FOR NO KEY UPDATE")  # what a usage write takes
        began = time.monotonic()
        assert await asyncio.wait_for(heartbeat(store_pool, beat), timeout=5) is True
        assert time.monotonic() - began < 0.9  # did not wait for the deploy (lock waits are logged at 1 s)
        assert await store_pool.fetchval("SELECT heartbeat_at FROM nodes WHERE name = 'hb1'") == before
        await held.rollback()

    await _node(store_pool, beat_age_seconds=60)
    async with store_pool.acquire() as deploy:
        held = deploy.transaction()
        await held.start()
        await deploy.execute("SELECT 1 FROM nodes WHERE name = 'hb1' FOR NO KEY UPDATE")
        waiting = asyncio.create_task(heartbeat(store_pool, beat))
        await asyncio.sleep(0.5)
        assert not waiting.done()  # a stale beat is written, whatever the wait
        await held.commit()
    assert await asyncio.wait_for(waiting, timeout=5) is True
    age = await store_pool.fetchval("SELECT extract(epoch FROM now() - heartbeat_at) FROM nodes WHERE name = 'hb1'")
    assert age < 5

    await _node(store_pool, beat_age_seconds=0)  # a free row is written at once
    assert await heartbeat(store_pool, beat) is True
