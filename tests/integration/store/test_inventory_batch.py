"""Inventories arriving together are kept in one statement and reconciled against ledgers read in one query
(eru_allocator.nodes.reconciler.on_inventories): each node's findings are exactly what reconciling it alone finds, the
newest inventory of a node wins, one arriving late is not reconciled, an unregistered node has nothing to
reconcile (docs/operations.md "Reconciling the ledger")."""

from __future__ import annotations

import json

import asyncpg

from eru.domain.inventory import InventoryEntry, NodeInventory
from eru.reconcile import ReconcilePolicy
from eru_allocator.containers.events import EventContext
from eru_allocator.nodes.reconciler import on_inventories, reconcile_node
from eru_allocator.store.container_store import PgContainerEvents
from eru_allocator.store.node_store import PgNodes

POLICY = ReconcilePolicy(grace_seconds=0.0, unknown="report", drift="report")


async def _ledger(pool: asyncpg.Pool) -> None:
    await pool.execute("INSERT INTO pods (name) VALUES ('inv')")
    for node in ("r1", "r2", "r3"):
        await pool.execute(
            "INSERT INTO nodes (name, pod, cpu_map, memory) VALUES ($1, 'inv', '{\"0\": 100, \"1\": 100}', 1024)", node
        )
    allocation = json.dumps({"cpu_map": {"0": 50}, "numa_node": None, "memory": 64})
    for cid, node, state in [("c1", "r1", "running"), ("c2", "r1", "removed"), ("c3", "r2", "running")]:
        await pool.execute(
            """INSERT INTO containers (id, node, pod, workload, image, tenant, class, allocation, state,
                                       updated_at)
               VALUES ($1, $2, 'inv', 'w', 'busybox', '', 'prod', $3::jsonb, $4, now() - interval '1 minute')""",
            cid,
            node,
            allocation,
            state,
        )


def _inventory(node: str, taken_at: float, *containers: str) -> NodeInventory:
    entries = [InventoryEntry(container_id=cid, managed=True, node=node, cpuset="0") for cid in containers]
    return NodeInventory(node=node, agent="a1", taken_at=taken_at, containers=entries)


async def test_a_batch_finds_what_each_node_alone_finds(store_pool: asyncpg.Pool) -> None:
    await _ledger(store_pool)
    ctx = EventContext("allocator/test", PgContainerEvents(store_pool), PgNodes(store_pool))
    newest = {
        "r1": _inventory("r1", 20.0, "c1", "c2", "u1"),  # c2 is gone in the ledger but runs; u1 is unknown
        "r2": _inventory("r2", 20.0),  # c3 missing
        "r3": _inventory("r3", 20.0, "c3"),  # c3 is r2's
    }
    expected = {node: await reconcile_node(ctx, inv, POLICY, dry_run=True) for node, inv in newest.items()}
    assert any(expected.values())  # the scenario finds something
    batch = [_inventory("r1", 10.0, "c1"), *newest.values(), _inventory("ghost", 5.0, "x")]  # older r1; unregistered
    assert await on_inventories(ctx, batch, POLICY, True) == expected
    kept = dict(await store_pool.fetch("SELECT node, taken_at FROM node_inventories"))
    assert kept == {"r1": 20.0, "r2": 20.0, "r3": 20.0, "ghost": 5.0}
    assert await on_inventories(ctx, [_inventory("r1", 15.0)], POLICY, True) == {}  # late: kept one is newer
    assert await on_inventories(ctx, [_inventory("r2", 30.0)], POLICY, False) == {}  # reconciliation off: kept only
    assert await store_pool.fetchval("SELECT taken_at FROM node_inventories WHERE node = 'r2'") == 30.0
