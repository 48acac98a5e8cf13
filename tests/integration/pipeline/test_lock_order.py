"""Lock order between the deploy path and the container-events path, on a real PostgreSQL.

The deadlock seen under churn (deploys and removes together): a deploy inserts containers on several nodes, which
takes the foreign key's KEY SHARE lock on each node row, before it changes their usage; a batch of `removed` events
returned usage on several nodes and locked them first with `SELECT … FOR UPDATE`, which conflicts with KEY SHARE.
Interleaved — events lock n1 and wait for n2, the deploy (holding KEY SHARE on n2) inserts on n1 — PostgreSQL found
a cycle after `deadlock_timeout` (1 s: the stalls). Usage writers now lock node rows `FOR NO KEY UPDATE`, which a
foreign key check does not conflict with (docs/store.md "Transactions and locks").
"""

from __future__ import annotations

import asyncio
import json
import random

import asyncpg

from eru.bus import new_envelope
from eru.domain import ContainerEvent
from eru.store import transaction
from eru.store.protocol import ContainerRow, DeployRow, PodWrites, Usage
from eru_allocator.containers import events
from eru_allocator.containers.events import EventContext
from eru_allocator.store import sql
from eru_allocator.store.container_store import PgContainerEvents
from eru_allocator.store.node_store import PgNodes
from eru_allocator.store.postgres import PgPodSession

NODE_SQL = "INSERT INTO nodes (name, pod, cpu_map, memory) VALUES ($1, 'p1', '{\"0\": 100}', 1073741824)"


async def _setup(pool: asyncpg.Pool) -> None:
    await pool.execute("INSERT INTO pods (name) VALUES ('p1')")
    for name in ("n1", "n2"):
        await pool.execute(NODE_SQL, name)
    await pool.execute(
        "INSERT INTO deploys (id, request_id, pod, tenant, status, request) VALUES ('d0', 'r0', 'p1', 'default', "
        "'planned', '{}')"
    )


async def _insert_container(conn: asyncpg.Connection, container_id: str, node: str) -> None:
    await conn.execute(
        sql.INSERT_CONTAINER_SQL,
        container_id,
        "d0",
        node,
        "p1",
        "w",
        "busybox",
        "default",
        "prod",
        0,
        json.dumps({"cpu_map": {"0": 10}, "memory": 1}),
        "{}",
        "planned",
        "{}",
        None,
    )


async def test_usage_return_on_several_nodes_never_deadlocks_with_a_deploy_inserting_on_them(
    store_pool: asyncpg.Pool,
) -> None:
    await _setup(store_pool)
    usage = Usage({"0": 10}, 1, {})
    deploy = await store_pool.acquire()
    events = await store_pool.acquire()
    try:
        deploy_tx = deploy.transaction()
        events_tx = events.transaction()
        await deploy_tx.start()
        await events_tx.start()
        await _insert_container(deploy, "c2", "n2")  # the deploy: KEY SHARE on n2 (foreign key)
        # the events batch returns usage on n1 and n2, locking them in name order
        returning = asyncio.create_task(sql.change_usages(events, {"n1": usage, "n2": usage}, -1))
        await asyncio.sleep(0.3)  # let it lock n1 (and, before the fix, wait for n2)
        await _insert_container(deploy, "c1", "n1")  # the deploy: KEY SHARE on n1
        await asyncio.wait_for(returning, timeout=10)  # before the fix: DeadlockDetectedError here or in the insert
        await events_tx.commit()
        await sql.change_usages(deploy, {"n1": usage, "n2": usage}, 1)
        await deploy_tx.commit()
    finally:
        await store_pool.release(deploy)
        await store_pool.release(events)
    used = {row["name"]: row["used_memory"] for row in await store_pool.fetch("SELECT name, used_memory FROM nodes")}
    assert used == {"n1": 1, "n2": 1}  # GREATEST(0 - 1, 0) + 1: both transactions applied


def _planned(rng: random.Random, index: int, nodes: list[str]) -> PodWrites:
    """What a deploy batch submits: here, one deploy with a container on each node."""
    writes = PodWrites()
    deploy_id = f"d{index}"
    writes.deploys.append(DeployRow(deploy_id, f"r{index}", "p1", "default", "planned", "{}", "{}"))
    for node in rng.sample(nodes, len(nodes)):  # the order a plan happens to list its nodes in
        allocation = json.dumps({"cpu_map": {"0": 1}, "memory": 1})
        writes.containers.append(
            ContainerRow(f"{deploy_id}-{node}", deploy_id, node, "p1", "w", "busybox", "default", "prod", 0,
                         allocation, "{}", "running", "{}", None)
        )  # fmt: skip
        writes.usage[node] = [Usage({"0": 1}, 1, {})]
    return writes


async def test_removed_events_and_deploys_together_never_deadlock(store_pool: asyncpg.Pool) -> None:
    """The real writers, many at once: `events.apply_events` with batches of `removed` events spanning nodes, and
    `PgPodSession.submit` inserting containers on every node in a random order."""
    nodes = ["n1", "n2", "n3", "n4"]
    await store_pool.execute("INSERT INTO pods (name) VALUES ('p1')")
    for name in nodes:
        await store_pool.execute(NODE_SQL.replace("100}", "100000}"), name)
    rng = random.Random(19)
    for index in range(40):
        async with transaction(store_pool) as conn:
            await PgPodSession(conn, "p1").submit(_planned(rng, index, nodes))
    running = [row["id"] for row in await store_pool.fetch("SELECT id FROM containers ORDER BY random()")]
    ctx = EventContext("test", PgContainerEvents(store_pool), PgNodes(store_pool))

    async def remove_some(ids: list[str]) -> None:
        items = []
        for container_id in ids:
            event = ContainerEvent(node=container_id.split("-")[1], container_id=container_id, kind="removed")
            items.append(([event], new_envelope("eru.container.removed", "node-agent/test")))
        await events.apply_events(ctx, items)

    async def deploy_more(index: int) -> None:
        async with transaction(store_pool) as conn:
            await PgPodSession(conn, "p1").submit(_planned(rng, index, nodes))

    work = [remove_some(running[i : i + 8]) for i in range(0, len(running), 8)]
    work += [deploy_more(100 + i) for i in range(len(work))]
    rng.shuffle(work)
    results = await asyncio.gather(*work, return_exceptions=True)
    assert [r for r in results if r is not None] == []
    removed = await store_pool.fetchval("SELECT count(*) FROM containers WHERE state = 'removed'")
    assert removed == len(running)
    used = await store_pool.fetch("SELECT name, used_memory FROM nodes ORDER BY name")
    assert [row["used_memory"] for row in used] == [len(work) // 2] * len(nodes)
