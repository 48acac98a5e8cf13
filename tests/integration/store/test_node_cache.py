"""The allocator's node cache gives exactly the snapshot nodes a full read gives, after every kind of write to a node
(usage by another transaction, two changes inside one transaction, capacity, cordon, silence, conditions, a plain
UPDATE that bumps no version), and parses only the rows that changed (docs/store.md "Node cache")."""

from __future__ import annotations

import asyncpg

from eru.domain.colocation import NodeCondition
from eru.domain.messages import CordonRequest, Heartbeat, SetNodeRequest
from eru.store import transaction
from eru.store.protocol import Usage
from eru.store.transaction import Connection
from eru_allocator.nodes.registry import cordon, heartbeats, record_conditions, set_node
from eru_allocator.store import sql
from eru_allocator.store.node_cache import NodeCache
from eru_allocator.store.node_store import PgNodes

POD = "nc"
NAMES = [f"nc{i}" for i in range(1, 6)]


async def _same(conn: Connection, cache: NodeCache) -> list[str]:
    """The cache's answer equals a full read's; the schedulable names."""
    cached = await cache.schedulable(conn, POD, 30.0)
    fresh = await sql.schedulable_nodes(conn, POD, 30.0)
    assert cached == fresh
    return [node.name for node in cached[0]]


async def _check(pool: asyncpg.Pool, cache: NodeCache) -> list[str]:
    async with transaction(pool) as conn:
        return await _same(conn, cache)


async def test_the_cache_matches_a_full_read_after_every_kind_of_write(store_pool: asyncpg.Pool) -> None:
    cache = NodeCache()
    for name in NAMES:
        await set_node(
            PgNodes(store_pool), SetNodeRequest(node=name, pod=POD, cpu_map={"0": 100, "1": 100}, memory=1 << 30)
        )
    await heartbeats(PgNodes(store_pool), [Heartbeat(node=name, containers=[]) for name in NAMES])
    assert await _check(store_pool, cache) == NAMES
    assert (cache.parsed, cache.reused) == (5, 0)
    assert await _check(store_pool, cache) == NAMES
    assert (cache.parsed, cache.reused) == (5, 5)  # nothing changed: nothing parsed

    async with transaction(store_pool) as conn:  # usage written by another transaction (a deploy, an event)
        usage = Usage({"0": 30}, 1 << 20, {})
        await sql.change_usages(conn, {"nc1": usage, "nc2": usage}, 1)
    await _check(store_pool, cache)
    assert cache.parsed == 7

    async with transaction(store_pool) as conn:  # two changes of one row in one transaction, read in between
        await sql.change_usage(conn, "nc3", Usage({"1": 10}, 0, {}), 1)
        await _same(conn, cache)
        await sql.change_usage(conn, "nc3", Usage({"1": 15}, 0, {}), 1)
        await _same(conn, cache)
    await _check(store_pool, cache)

    await set_node(PgNodes(store_pool), SetNodeRequest(node="nc4", cpu_map={"0": 100, "1": 100, "2": 100}))  # capacity
    await store_pool.execute("UPDATE nodes SET used_memory = 7 WHERE name = 'nc5'")  # no version bump
    await _check(store_pool, cache)

    await cordon(PgNodes(store_pool), CordonRequest(node="nc1"))
    await store_pool.execute("UPDATE node_status SET heartbeat_at = now() - interval '1 hour' WHERE name = 'nc2'")
    await record_conditions(PgNodes(store_pool), [NodeCondition(node="nc3", time=1.0, forbid_schedule_cpu=True)])
    assert await _check(store_pool, cache) == ["nc3", "nc4", "nc5"]
    async with transaction(store_pool) as conn:
        assert (await cache.schedulable(conn, POD, 30.0))[1] == frozenset({"nc3"})

    parsed = cache.parsed
    await heartbeats(
        PgNodes(store_pool), [Heartbeat(node="nc2", containers=[])]
    )  # heard from again: back, not re-parsed
    await cordon(
        PgNodes(store_pool), CordonRequest(node="nc1", cordoned=False)
    )  # uncordoned: its row changed, re-parsed
    assert await _check(store_pool, cache) == NAMES
    assert cache.parsed == parsed + 1
