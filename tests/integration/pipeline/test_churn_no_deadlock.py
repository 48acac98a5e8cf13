"""Deploys and removes together on two allocator replicas and real sim node agents: no PostgreSQL deadlock.

The churn of the soak (docs/performance.md) in small: deploys of 1–5 containers spread over several nodes while the
oldest running containers are removed in groups, so batches of `removed` events return usage on several nodes at the
moment new containers are inserted on them. PostgreSQL's own count (`pg_stat_database.deadlocks`) must stay 0, and the
suite-wide hook (tests/conftest.py) fails the test if any service logged one.
"""

from __future__ import annotations

import asyncio
import random

import asyncpg
import pytest
from pipeline_harness import Pipeline, SimNodes, assert_usage_consistent, while_progressing

from eru.domain.messages import RemoveRequest

DEPLOYS = 160
OTHER_SESSIONS_SQL = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
)


async def _deadlocks(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        # every other session has ended (its statistics are written when it exits)
        async with asyncio.timeout(20):
            while await conn.fetchval(OTHER_SESSIONS_SQL):  # noqa: ASYNC110 -- polling PostgreSQL, no event to wait on
                await asyncio.sleep(0.05)
        return int(await conn.fetchval("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"))
    finally:
        await conn.close()


# The burst fails fast when answers stop coming (while_progressing, 30 s without one); the test's own timeout is only
# a backstop for a loaded machine (14 s at load 10; the like burst of test_allocator_concurrency took over 120 s at
# load 35 under `stress --cpu 2`).
@pytest.mark.timeout(300)
async def test_deploys_and_removes_together_never_deadlock(nats_url: str, postgres_dsn: str) -> None:
    before = await _deadlocks(postgres_dsn)
    pipe = Pipeline(nats_url, postgres_dsn)
    await pipe.start(replicas=2, deploy_concurrency=8)
    sims = SimNodes(nats_url, count=6, cores=16, memory=64 * 1024**3)
    await sims.start()
    rng = random.Random(19)
    removed: set[str] = set()
    try:
        await pipe.wait_for(lambda: pipe.pool.fetchval("SELECT count(*) FROM nodes"), 6)

        async def deploy(index: int) -> str:
            count = rng.randint(1, 5)
            workload = {"name": f"w{index % 5}", "image": "busybox", "resources": {"cpu_request": 0.1}}
            # no deadline per request: the burst fails only when answers stop coming (while_progressing)
            return await pipe.deploy(within=3600, request_id=f"churn-{index}", count=count, workload=workload)

        async def remover(stop: asyncio.Event) -> None:
            while not stop.is_set():
                rows = await pipe.pool.fetch(
                    "SELECT id FROM containers WHERE state = 'running' ORDER BY created_at LIMIT 8"
                )
                ids = [row["id"] for row in rows if row["id"] not in removed]
                if ids:
                    removed.update(ids)
                    await pipe.op("remove", RemoveRequest(container_ids=ids), within=60)
                else:
                    await asyncio.sleep(0.02)

        stop = asyncio.Event()
        removers = [asyncio.create_task(remover(stop)) for _ in range(3)]
        in_flight = asyncio.Semaphore(6)  # a steady stream of small commits rather than a few large ones

        async def paced(index: int) -> str:
            async with in_flight:
                return await deploy(index)

        deploy_ids = await while_progressing([paced(i) for i in range(DEPLOYS)])
        await while_progressing([pipe.terminal(d, within=3600) for d in deploy_ids])
        stop.set()
        await asyncio.gather(*removers)
        await pipe.wait_for(
            lambda: pipe.pool.fetchval("SELECT count(*) FROM containers WHERE state IN ('stopping', 'planned')"),
            0,
            within=60,
        )
        assert len(removed) > DEPLOYS  # the churn really happened
        await assert_usage_consistent(pipe.pool)
    finally:
        await sims.stop()
        await pipe.close()
    assert await _deadlocks(postgres_dsn) == before
