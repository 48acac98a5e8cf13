"""Node inventories' rows and the ledger they are reconciled with (docs/operations.md "Reconciling the ledger"): a
batch of inventories kept (the newest per node), each node's cores, the containers the ledger holds on a node, and the
newest inventories for `eru reconcile` (docs/allocator.md "The store seam"). Typed rows: `eru.reconcile.LedgerRow`,
`NodeInventory`.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import asyncpg

from eru.domain.inventory import NodeInventory
from eru.reconcile import GONE, LedgerRow
from eru.store.nodes import KeptInventory

# A batch of inventories kept in one statement (rows in node order: replicas' batches never deadlock); the nodes
# whose inventory was kept come back (an older one arriving late is not).
STORE_MANY_SQL = """
INSERT INTO node_inventories (node, agent, taken_at, body)
SELECT node, agent, taken_at, body::jsonb FROM unnest($1::text[], $2::text[], $3::float8[], $4::text[])
       AS u (node, agent, taken_at, body) ORDER BY node
ON CONFLICT (node) DO UPDATE SET agent = EXCLUDED.agent, taken_at = EXCLUDED.taken_at, body = EXCLUDED.body,
                                 received_at = now()
 WHERE node_inventories.taken_at < EXCLUDED.taken_at
RETURNING node
"""
NODE_CORES_SQL = "SELECT name, cpu_map FROM nodes WHERE name = ANY($1::text[])"
_GONE = ", ".join(f"'{s}'" for s in sorted(GONE))
_LEDGER_COLUMNS = """c.node, c.id, c.state, extract(epoch FROM c.updated_at)::float8 AS updated_at, c.allocation,
       c.class,
       EXISTS (SELECT 1 FROM containers r
                WHERE r.replaces IS NOT NULL AND r.replaces = c.id AND r.state IN ('planned', 'creating')) AS pending"""
# `pending` says `r.replaces IS NOT NULL` so that its lookup can take the partial index containers_replaces: without
# it PostgreSQL hashed the subquery over a scan of the whole table, once per call (27–35 ms a call with 20,000
# containers in the 5,000-node cell of docs/performance.md, where a process's inventories of ~200 nodes come in one
# message). Two halves rather than `node = ANY … AND (state NOT IN gone OR id = ANY …)`, whose OR took two bitmap
# scans. 200 nodes of 20,000 containers on an idle embedded server: 4.0 → 1.9 ms a call.
LEDGERS_SQL = f"""
SELECT {_LEDGER_COLUMNS}
  FROM containers c
 WHERE c.node = ANY($1::text[]) AND c.state NOT IN ({_GONE})
UNION ALL
SELECT {_LEDGER_COLUMNS}
  FROM containers c
 WHERE c.id = ANY($2::text[]) AND c.state IN ({_GONE}) AND c.node = ANY($1::text[])
"""
INVENTORIES_SQL = """
SELECT i.node, i.body, extract(epoch FROM now() - i.received_at)::float8 AS age
  FROM node_inventories i JOIN nodes n ON n.name = i.node
 WHERE ($1::text IS NULL OR i.node = $1) AND ($2::text IS NULL OR n.pod = $2)
 ORDER BY i.node
"""


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _ledger_row(row: Any) -> LedgerRow:
    return LedgerRow(
        container_id=row["id"],
        state=row["state"],
        updated_at=row["updated_at"],
        allocation=_loads(row["allocation"]),
        priority_class=row["class"],
        pending_replacement=row["pending"],
    )


async def cores_of(pool: asyncpg.Pool, nodes: Collection[str]) -> dict[str, list[str]]:
    """node → its cores, for those of `nodes` that are registered."""
    return {row["name"]: list(_loads(row["cpu_map"])) for row in await pool.fetch(NODE_CORES_SQL, list(nodes))}


async def ledgers(pool: asyncpg.Pool, listed: Mapping[str, Collection[str]]) -> dict[str, list[LedgerRow]]:
    """What the ledger holds on each node of `listed` (node → the container ids its inventory lists): its containers
    not gone, and those its inventory lists whatever their state; in one query."""
    nodes = list(listed)
    every = sorted(set().union(*(set(ids) for ids in listed.values())))
    found: dict[str, list[LedgerRow]] = {node: [] for node in nodes}
    for row in await pool.fetch(LEDGERS_SQL, nodes, every):
        # a gone container only when that node's own inventory lists it
        if row["state"] not in GONE or row["id"] in listed[row["node"]]:
            found[row["node"]].append(_ledger_row(row))
    return found


async def keep_inventories(pool: asyncpg.Pool, inventories: Sequence[NodeInventory]) -> list[str]:
    """Keep each of `inventories` (one per node, in node order) unless a newer one of its node is kept already; the
    nodes whose inventory was kept, in name order."""
    stored = await pool.fetch(
        STORE_MANY_SQL,
        [i.node for i in inventories],
        [i.agent for i in inventories],
        [i.taken_at for i in inventories],
        [i.model_dump_json() for i in inventories],
    )
    return sorted(row["node"] for row in stored)


async def kept_inventories(pool: asyncpg.Pool, node: str | None, pod: str | None) -> list[KeptInventory]:
    """The newest kept inventory of each node (of `node`, in `pod`), by node."""
    rows = await pool.fetch(INVENTORIES_SQL, node, pod)
    return [
        KeptInventory(row["node"], NodeInventory.model_validate(_loads(row["body"])), float(row["age"])) for row in rows
    ]
