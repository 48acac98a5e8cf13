"""A pod's per-node reservations of tenants as the store reads them (docs/fairness-and-scoring.md, migration 0035):
what each tenant reserved on each node and what its live containers hold there, read once per batch or admission
pass under the pod's lock. Typed rows (docs/allocator.md "The store seam"); the decisions are pure
(`eru.planning.reservations`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from eru.domain import ResourceRequest
from eru.errors import InvalidInput
from eru.fairness.ledger import parent_of
from eru.planning import PlanningConfig, normalize_request
from eru.planning.reservations import Amount
from eru.store.nodes import NodeCapacity
from eru.store.operations import ListedReservation, Reserved
from eru.store.transaction import Connection
from eru.units import cpu_to_pieces
from eru_allocator.store.accounting import json_text

RESERVATIONS_SQL = """
SELECT r.tenant, r.node, r.cpu, r.memory, n.share_base FROM tenant_reservations r JOIN nodes n ON n.name = r.node
 WHERE n.pod = $1
"""
HELD_BY_NODE_SQL = """
SELECT tenant, node, resources, count(*) AS n FROM containers
 WHERE pod = $1 AND state NOT IN ('removed', 'failed', 'lost') AND replaces IS NULL
 GROUP BY tenant, node, resources
"""


@dataclass(frozen=True)
class ReservationRow:
    """What `tenant` reserved on `node`: cores as the decimal text the operator gave, memory bytes."""

    tenant: str
    node: str
    cpu: str
    memory: int


@dataclass(frozen=True)
class HeldOnNode:
    """`count` live containers of `tenant` on `node` with the same stored requirement (`resources`, JSON text)."""

    tenant: str
    node: str
    resources: str
    count: int


@dataclass
class Fairness:
    """A pod's reservations (node → top-level tenant → amount) and, per (top-level tenant, node), what the tenant's
    live containers hold there."""

    reservations: dict[str, dict[str, Amount]] = field(default_factory=dict)
    held: dict[tuple[str, str], Amount] = field(default_factory=dict)


def instance_amount(resources: Any, config: PlanningConfig) -> Amount | None:
    """What one container with the stored requirement holds on its node (bound CPU pieces, memory bytes)."""
    try:
        loaded = json.loads(resources) if isinstance(resources, str) else resources
        need = normalize_request(ResourceRequest.model_validate(loaded), config, "resources")
    except (InvalidInput, ValueError):
        return None  # a record from an older model: not counted
    return Amount(need.cpu_request if need.cpu_bind else 0, need.memory_request)


async def reservation_rows(conn: Connection, pod: str) -> list[ReservationRow]:
    """The reservations on `pod`'s nodes."""
    rows = await conn.fetch(RESERVATIONS_SQL, pod)
    return [ReservationRow(row["tenant"], row["node"], str(row["cpu"]), int(row["memory"])) for row in rows]


async def held_by_node(conn: Connection, pod: str) -> list[HeldOnNode]:
    """What live containers of `pod` hold, grouped by tenant, node and stored requirement."""
    rows = await conn.fetch(HELD_BY_NODE_SQL, pod)
    return [HeldOnNode(row["tenant"], row["node"], json_text(row["resources"]), int(row["n"])) for row in rows]


async def load(conn: Connection, pod: str, config: PlanningConfig) -> Fairness:
    """The pod's reservations and what each tenant holds per node (only read when the pod has reservations)."""
    return await from_reservations(conn, pod, await reservation_rows(conn, pod), config)


async def from_rows(conn: Connection, pod: str, rows: Iterable[Any], config: PlanningConfig) -> Fairness:
    """`load` from the pod's reservation rows read already (mappings of tenant, node, cpu, memory)."""
    typed = [ReservationRow(row["tenant"], row["node"], str(row["cpu"]), int(row["memory"])) for row in rows]
    return await from_reservations(conn, pod, typed, config)


async def from_reservations(
    conn: Connection, pod: str, rows: Iterable[ReservationRow], config: PlanningConfig
) -> Fairness:
    """`load` from the pod's reservations read already: what each tenant holds per node is read only when there
    are any."""
    fairness = Fairness()
    for row in rows:
        pieces = cpu_to_pieces(row.cpu, config.share_base, "cpu")
        fairness.reservations.setdefault(row.node, {})[row.tenant] = Amount(pieces, row.memory)
    if fairness.reservations:
        for held in await held_by_node(conn, pod):
            amount = instance_amount(held.resources, config)
            if amount is not None:
                key = (parent_of(held.tenant), held.node)
                total = Amount(amount.cpu * held.count, amount.memory * held.count)
                fairness.held[key] = fairness.held.get(key, Amount()).plus(total)
    return fairness


# ------------------------------------------------------------------------------------- the reservation operations
TENANT_EXISTS_SQL = "SELECT 1 FROM tenants WHERE name = $1"
LOCK_NODE_SQL = "SELECT name, pod, cpu_map, memory, share_base FROM nodes WHERE name = $1 FOR UPDATE"
OTHERS_SQL = """
SELECT coalesce(sum(cpu), 0) AS cpu, coalesce(sum(memory), 0) AS memory FROM tenant_reservations
 WHERE node = $1 AND tenant <> $2
"""
UPSERT_SQL = """
INSERT INTO tenant_reservations (tenant, node, cpu, memory) VALUES ($1, $2, $3::numeric, $4)
ON CONFLICT (tenant, node) DO UPDATE SET cpu = EXCLUDED.cpu, memory = EXCLUDED.memory, updated_at = now()
"""
DELETE_SQL = """
DELETE FROM tenant_reservations r USING nodes n WHERE r.tenant = $1 AND r.node = $2 AND n.name = r.node
RETURNING n.pod
"""
PAGE_SQL = """
SELECT r.tenant, r.node, n.pod, r.cpu, r.memory
  FROM tenant_reservations r JOIN nodes n ON n.name = r.node
 WHERE ($1::text IS NULL OR r.tenant = $1) AND ($2::text IS NULL OR n.pod = $2)
   AND ($4::text IS NULL OR (r.tenant, r.node) > ($4, $5))
 ORDER BY r.tenant, r.node LIMIT $3
"""


async def tenant_exists(conn: Connection, name: str) -> bool:
    """Whether tenant `name` was created."""
    return await conn.fetchval(TENANT_EXISTS_SQL, name) is not None


async def lock_node(conn: Connection, node: str) -> NodeCapacity | None:
    """Lock `node`'s row until the transaction ends (FOR UPDATE: two reservations on it check one after the other)
    and read its capacity; None when it is unknown."""
    row = await conn.fetchrow(LOCK_NODE_SQL, node)
    if row is None:
        return None
    cpu_map = json.loads(row["cpu_map"]) if isinstance(row["cpu_map"], str) else row["cpu_map"]
    return NodeCapacity(
        row["name"],
        row["pod"],
        {str(core): int(pieces) for core, pieces in cpu_map.items()},
        int(row["memory"]),
        share_base=int(row["share_base"] or 100),
    )


async def reserved_by_others(conn: Connection, node: str, tenant: str) -> Reserved:
    """What tenants other than `tenant` reserved on `node`."""
    row = await conn.fetchrow(OTHERS_SQL, node, tenant)
    if row is None:
        return Reserved(Fraction(0), 0)
    return Reserved(Fraction(str(row["cpu"])), int(row["memory"]))


async def put_reservation(conn: Connection, tenant: str, node: str, cpu: str, memory: int) -> None:
    """Set `tenant`'s reservation on `node` (cores as decimal text, memory bytes), replacing an earlier one."""
    await conn.execute(UPSERT_SQL, tenant, node, cpu, memory)


async def drop_reservation(conn: Connection, tenant: str, node: str) -> str | None:
    """Drop `tenant`'s reservation on `node`; the node's pod, None when there was none."""
    pod = await conn.fetchval(DELETE_SQL, tenant, node)
    return None if pod is None else str(pod)


async def reservation_page(
    conn: Connection, tenant: str | None, pod: str | None, limit: int, after: tuple[str, str] | None
) -> list[ListedReservation]:
    """Up to `limit` reservations (of `tenant`, in `pod`) after `after` (tenant, node), in that order."""
    rows = await conn.fetch(PAGE_SQL, tenant, pod, limit, *(after or (None, None)))
    return [
        ListedReservation(row["tenant"], row["node"], row["pod"], float(row["cpu"]), int(row["memory"])) for row in rows
    ]
