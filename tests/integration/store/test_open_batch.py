"""A deploy batch's reads in one round trip (`PgPodSession.open_batch`, migration 0160, docs/store.md "A deploy batch's
reads") give exactly what the separate statements give — `policy_and_deploys` and `snapshot` — on a real PostgreSQL:
policy, request keys found live, in history and settled, schedulable nodes (cordoned, silent and forbidding ones
too), live counts of the batch's workloads or of all, reservations with their holdings, tenants with quotas and
limits, the score and batch inputs; and they parse only the node rows that changed."""

from __future__ import annotations

import asyncpg
import pytest

from eru.domain.colocation import NodeCondition
from eru.domain.messages import CordonRequest, Heartbeat, SetNodeRequest
from eru.planning import PlanningConfig
from eru.planning.left_out import NodeState, Watermark
from eru.store import pod_lock_key, transaction
from eru.store.protocol import SnapshotNeeds, Usage
from eru.store.transaction import Connection
from eru_allocator.nodes.registry import cordon, heartbeats, record_conditions, set_node
from eru_allocator.store import sql
from eru_allocator.store.node_cache import NodeCache
from eru_allocator.store.node_store import PgNodes
from eru_allocator.store.postgres import PgPodSession, PgStore

POD = "ob"
NAMES = [f"ob{i}" for i in range(1, 6)]
CONFIG = PlanningConfig()
CONTAINER_SQL = """
INSERT INTO containers (id, deploy_id, node, pod, workload, image, tenant, class, priority, allocation, resources,
                        state, labels)
VALUES ($1, 'd-live', $2, $3, $4, 'busybox', $5, 'prod', 0, '{}'::jsonb,
        '{"cpu": "0.5", "memory": "64MiB"}'::jsonb, $6, '{}'::jsonb)
"""
KEYS = ["k-live", "k-history", "k-settled", "k-dead", "k-unknown"]


async def _setup(pool: asyncpg.Pool) -> None:
    for name in NAMES:
        await set_node(PgNodes(pool), SetNodeRequest(node=name, pod=POD, cpu_map={"0": 100, "1": 100}, memory=1 << 30))
    await set_node(PgNodes(pool), SetNodeRequest(node="other1", pod="elsewhere", cpu_map={"0": 100}, memory=1 << 30))
    await heartbeats(PgNodes(pool), [Heartbeat(node=name, containers=[]) for name in [*NAMES, "other1"]])
    await pool.execute('UPDATE pods SET policy = \'{"scorers": {"qos": 2}}\' WHERE name = $1', POD)
    await pool.execute("INSERT INTO tenants (name, weight, quota, limits) VALUES ('acme', 2.5, '{\"cpu\": 4}', NULL)")
    await pool.execute("INSERT INTO tenants (name, weight, limits) VALUES ('zeta', 1, '{\"memory\": 1073741824}')")
    await pool.execute("INSERT INTO tenant_reservations (tenant, node, cpu, memory) VALUES ('acme', 'ob2', 1.5, 1024)")
    await pool.execute(
        "INSERT INTO deploys (id, request_id, pod, tenant, status, request, result)"
        " VALUES ('d-live', 'k-live', $1, 'acme', 'completed', '{}', '{\"placements\": {}}')",
        POD,
    )
    await pool.execute(
        "INSERT INTO deploys_history (id, request_id, pod, tenant, status, finished_at, record)"
        " VALUES ('d-old', 'k-history', $1, 'acme', 'completed', now(), '{\"result\": {\"x\": 1}}')",
        POD,
    )
    for key, outcome in (("k-settled", "accepted"), ("k-dead", "dead_lettered")):
        await pool.execute(
            "INSERT INTO settled_requests (request_id, kind, outcome, deploy_id, reason, message_id, expires_at)"
            " VALUES ($1, 'deploy', $2, 'd-gone', 'why', 'm-1', now() + interval '1 day')",
            key,
            outcome,
        )
    live = [("web", "ob1", "running"), ("web", "ob1", "running"), ("api", "ob2", "creating"), ("web", "ob2", "removed")]
    for index, (workload, node, state) in enumerate(live):
        await pool.execute(CONTAINER_SQL, f"c{index}", node, POD, workload, "acme", state)


NEEDS = [
    SnapshotNeeds(CONFIG, 30.0),
    SnapshotNeeds(CONFIG, 30.0, workloads=frozenset({"web", "new"})),
    SnapshotNeeds(CONFIG, 30.0, score=True, workloads=frozenset({"api"})),
    SnapshotNeeds(CONFIG, 30.0, batch=True),
]


async def _same(pool: asyncpg.Pool, cache: NodeCache, needs: SnapshotNeeds, pod: str = POD) -> None:
    async with transaction(pool) as conn:
        one = await PgPodSession(conn, pod, cache).open_batch(KEYS, needs)
        separate = PgPodSession(conn, pod, NodeCache())
        policy, existing = await separate.policy_and_deploys(KEYS)
        assert one == (policy, existing, await separate.snapshot(needs))


@pytest.mark.parametrize("needs", NEEDS, ids=["all", "workloads", "score", "batch"])
async def test_one_round_trip_reads_what_the_separate_statements_read(
    store_pool: asyncpg.Pool, needs: SnapshotNeeds
) -> None:
    await _setup(store_pool)
    cache = NodeCache()
    await _same(store_pool, cache, needs)
    async with transaction(store_pool) as conn:
        policy, existing, snapshot = await PgPodSession(conn, POD, cache).open_batch(KEYS, needs)
    assert policy == {"scorers": {"qos": 2}}
    assert {key: found.status for key, found in existing.items()} == {
        "k-live": "completed",
        "k-history": "completed",
        "k-settled": "settled:accepted",
        "k-dead": "settled:dead_lettered",
    }
    assert [node.name for node in snapshot.nodes] == NAMES
    assert {"acme", "zeta"} <= set(snapshot.tenants)
    assert snapshot.reservations == {"ob2": {"acme": snapshot.reservations["ob2"]["acme"]}}
    await _same(store_pool, NodeCache(), needs, pod="no-such-pod")  # an unknown pod: no policy, no nodes


async def test_only_changed_node_rows_are_sent_whole_and_parsed(store_pool: asyncpg.Pool) -> None:
    await _setup(store_pool)
    cache, needs = NodeCache(), NEEDS[0]
    await _same(store_pool, cache, needs)
    assert (cache.parsed, cache.reused) == (5, 0)
    await _same(store_pool, cache, needs)
    assert (cache.parsed, cache.reused) == (5, 5)
    async with transaction(store_pool) as conn:  # usage by another transaction: two rows change
        await sql.change_usages(conn, {"ob1": Usage({"0": 30}, 1 << 20, {}), "ob3": Usage({"1": 5}, 0, {})}, 1)
    await _same(store_pool, cache, needs)
    assert (cache.parsed, cache.reused) == (7, 8)
    async with transaction(store_pool) as conn:  # two changes of one row in one transaction, read in between
        session = PgPodSession(conn, POD, cache)
        await sql.change_usage(conn, "ob4", Usage({"1": 10}, 0, {}), 1)
        first = await session.open_batch(KEYS, needs)
        await sql.change_usage(conn, "ob4", Usage({"1": 15}, 0, {}), 1)
        second = await session.open_batch(KEYS, needs)
        assert first[2].nodes[3].used_cpu_map == {"1": 10}
        assert second[2].nodes[3].used_cpu_map == {"1": 25}  # relative: 10 + 15
    await cordon(PgNodes(store_pool), CordonRequest(node="ob1"))
    await store_pool.execute("UPDATE node_status SET heartbeat_at = now() - interval '1 hour' WHERE name = 'ob2'")
    await record_conditions(PgNodes(store_pool), [NodeCondition(node="ob3", time=1.0, forbid_schedule_cpu=True)])
    await _same(store_pool, cache, needs)
    async with transaction(store_pool) as conn:
        _, _, snapshot = await PgPodSession(conn, POD, cache).open_batch(KEYS, needs)
    assert [node.name for node in snapshot.nodes] == ["ob3", "ob4", "ob5"]
    assert snapshot.forbid_batch == frozenset({"ob3"})
    # the nodes left out come with their state (docs/planning.md "Nodes left out"), in the same round trip
    assert snapshot.unschedulable == {"ob1": NodeState(cordoned=True), "ob2": NodeState()}
    silent = snapshot.unschedulable["ob2"].silent_seconds
    assert silent is not None
    assert silent >= 3600
    assert snapshot.watermarks == {"ob3": (Watermark("cpu"),)}  # the condition carried no numbers


async def test_a_write_in_progress_during_a_read_is_read_by_the_next(store_pool: asyncpg.Pool) -> None:
    """A transaction (another replica's) that wrote a node before a batch's read and commits after it: its change is
    not in that read, and the next read — which passes the first one's horizon — has it (migration 0220)."""
    await _setup(store_pool)
    cache = NodeCache()
    await _same(store_pool, cache, NEEDS[0])
    async with store_pool.acquire() as other, other.transaction():
        await sql.change_usage(other, "ob2", Usage({"0": 40}, 1 << 20, {}), 1)  # its xid is older than the read's
        await sql.change_usage(store_pool, "ob3", Usage({"1": 7}, 0, {}), 1)  # a younger one, committed first
        await _same(store_pool, cache, NEEDS[0])  # ob3 seen, ob2 not committed yet
    await _same(store_pool, cache, NEEDS[0])
    async with transaction(store_pool) as conn:
        _, _, snapshot = await PgPodSession(conn, POD, cache).open_batch(KEYS, NEEDS[0])
    assert snapshot.nodes[1].used_cpu_map == {"0": 40}
    assert snapshot.nodes[2].used_cpu_map == {"1": 7}


async def test_a_rolled_back_own_write_is_read_again(store_pool: asyncpg.Pool) -> None:
    """A batch read its own transaction's uncommitted write, then rolled back: the next read serves the committed
    row, not the one the cache parsed (the row's `changed_xid` is older than the horizon, so it is named again)."""
    await _setup(store_pool)
    cache = NodeCache()
    await _same(store_pool, cache, NEEDS[0])
    async with store_pool.acquire() as conn:
        mine = conn.transaction()
        await mine.start()
        await sql.change_usage(conn, "ob4", Usage({"1": 60}, 0, {}), 1)
        _, _, snapshot = await PgPodSession(conn, POD, cache).open_batch(KEYS, NEEDS[0])
        assert snapshot.nodes[3].used_cpu_map == {"1": 60}
        await mine.rollback()
    await _same(store_pool, cache, NEEDS[0])
    async with transaction(store_pool) as conn:
        _, _, snapshot = await PgPodSession(conn, POD, cache).open_batch(KEYS, NEEDS[0])
    assert snapshot.nodes[3].used_cpu_map == {}


async def test_a_node_moved_to_another_pod_leaves_and_comes_back(store_pool: asyncpg.Pool) -> None:
    """A node row of the pod written to name another pod is no member after the next read; moved back, it is."""
    await _setup(store_pool)
    cache = NodeCache()
    await _same(store_pool, cache, NEEDS[0])
    await store_pool.execute("UPDATE nodes SET pod = 'elsewhere' WHERE name = 'ob3'")
    await _same(store_pool, cache, NEEDS[0])
    await _same(store_pool, cache, NEEDS[0], pod="elsewhere")
    await store_pool.execute("UPDATE nodes SET pod = $1 WHERE name = 'ob3'", POD)
    await _same(store_pool, cache, NEEDS[0])
    async with transaction(store_pool) as conn:
        _, _, snapshot = await PgPodSession(conn, POD, cache).open_batch(KEYS, NEEDS[0])
    assert [node.name for node in snapshot.nodes] == NAMES


async def _holds(conn: Connection) -> bool:
    """Whether this connection holds an advisory lock (the test takes no other)."""
    held = await conn.fetchval(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted"
    )
    return bool(held)


async def test_a_deploy_batch_takes_the_pods_lock_in_its_first_read(store_pool: asyncpg.Pool) -> None:
    """`PgStore.deploy_batch`: no lock before `open_batch`, the pod's lock held after it (another transaction cannot
    take it), and a verb called first takes it itself."""
    await _setup(store_pool)
    store = PgStore(store_pool)
    async with store.deploy_batch(POD) as session:
        assert not await _holds(session.conn)
        await session.open_batch(KEYS, NEEDS[0])
        assert await _holds(session.conn)
        async with transaction(store_pool) as other:
            assert not await other.fetchval("SELECT pg_try_advisory_xact_lock($1)", pod_lock_key(POD))
    async with store.deploy_batch(POD) as session:
        await session.has_waiting()
        assert await _holds(session.conn)
        policy, _, snapshot = await session.open_batch(KEYS, NEEDS[0])  # held already: the function is not asked
        assert policy is not None
        assert len(snapshot.nodes) == len(NAMES)
