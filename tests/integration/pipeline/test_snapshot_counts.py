"""A deploy batch's snapshot counts the live containers of its own workloads only (`SnapshotNeeds.workloads`,
docs/pipeline.md "Planning ahead"), on a real PostgreSQL: the counts are exactly the full snapshot's narrowed to
those workloads (gone containers not counted), and the query reads them through the partial index on (pod,
workload, node) rather than every live container of the pod."""

from __future__ import annotations

import json

import asyncpg

from eru.planning import PlanningConfig
from eru.store import transaction
from eru.store.protocol import SnapshotNeeds
from eru_allocator.store.postgres import WORKLOADS_COUNTS_SQL, PgPodSession, PgStore

NODE_SQL = "INSERT INTO nodes (name, pod, cpu_map, memory, state) VALUES ($1, 'p1', '{\"0\": 100}', 1073741824, 'up')"
DEPLOY_SQL = """
INSERT INTO deploys (id, request_id, pod, tenant, status, request) VALUES ($1, $1, 'p1', 'default', 'planned', '{}')
"""
CONTAINER_SQL = """
INSERT INTO containers (id, deploy_id, node, pod, workload, image, tenant, class, priority, allocation, resources,
                        state, labels)
VALUES ($1, 'd1', $2, 'p1', $3, 'busybox', 'default', 'prod', 0, '{}'::jsonb, '{}'::jsonb, $4, '{}'::jsonb)
"""
LIVE = [("web", "n1", 3), ("web", "n2", 1), ("api", "n1", 2), ("db", "n2", 4)]


async def _setup(pool: asyncpg.Pool) -> None:
    await pool.execute("INSERT INTO pods (name) VALUES ('p1')")
    for name in ("n1", "n2"):
        await pool.execute(NODE_SQL, name)
    await pool.execute(DEPLOY_SQL, "d1")
    index = 0
    for workload, node, count in LIVE:
        for _ in range(count):
            index += 1
            await pool.execute(CONTAINER_SQL, f"c{index}", node, workload, "running")
    for state in ("removed", "failed", "lost"):  # gone: never counted
        index += 1
        await pool.execute(CONTAINER_SQL, f"c{index}", "n1", "web", state)


async def test_a_batch_counts_its_own_workloads_exactly_as_the_whole_pod_read_would(store_pool: asyncpg.Pool) -> None:
    await _setup(store_pool)
    config = PlanningConfig()
    async with transaction(store_pool) as conn:
        session = PgPodSession(conn, "p1")
        whole = await session.snapshot(SnapshotNeeds(config, 3600.0))
        narrowed = await session.snapshot(SnapshotNeeds(config, 3600.0, workloads=frozenset({"web", "api", "new"})))
    assert whole.counts == {"web": {"n1": 3, "n2": 1}, "api": {"n1": 2}, "db": {"n2": 4}}
    assert narrowed.counts == {"web": {"n1": 3, "n2": 1}, "api": {"n1": 2}}
    assert narrowed == whole.for_workloads({"web", "api", "new"})  # what planning ahead compares
    assert narrowed.counted == {"web", "api", "new"}
    # what planning ahead reads without the lock for workloads the previous batch did not count
    unlocked = await PgStore(store_pool).live_counts("p1", {"api", "db", "new"})
    assert unlocked == {"api": {"n1": 2}, "db": {"n2": 4}}
    assert whole.for_workloads({"web"}).with_counts(unlocked).for_workloads({"api", "db"}) == whole.for_workloads(
        {"api", "db"}
    )


async def test_the_count_reads_the_workload_index(store_pool: asyncpg.Pool) -> None:
    await _setup(store_pool)
    async with store_pool.acquire() as conn:
        await conn.execute("SET enable_seqscan = off")  # the tiny table: ask whether the index can answer at all
        plan = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {WORKLOADS_COUNTS_SQL}", "p1", ["web"])
    text = json.dumps(plan)
    assert "containers_live_workload" in text
