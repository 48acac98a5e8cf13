"""Per-node reservations of tenants in the allocator (docs/fairness-and-scoring.md).

`eru.allocator.tenant-reserve|tenant-unreserve|tenant-reservations` manage the `tenant_reservations` table
(migration 0035). Deploys see a pod's reservations in the batch's `ClusterSnapshot` (`load`, once per batch or
admission pass under the pod lock): what each tenant reserved on each node and what its live containers hold there.
The decisions
themselves are pure: `eru.planning.reservations.withheld_for` / `withhold` (what a request may not use, recorded as
`"withheld"` in the deploy decision) and `eru.fairness.Ledger` (quota headroom, with reservations counting toward
quota).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import asyncpg
import structlog

from eru.bus.subjects import allocator_operation
from eru.domain import ResourceRequest
from eru.domain.messages import OperationReply
from eru.domain.tenants import TenantReservationsRequest, TenantReserveRequest, TenantUnreserveRequest
from eru.errors import InvalidInput, NotFound
from eru.fairness.ledger import is_group, parent_of
from eru.planning import PlanningConfig, normalize_request
from eru.planning.reservations import Amount
from eru.store import transaction
from eru.store.transaction import Connection
from eru.units import cpu_to_pieces, format_bytes, parse_bytes
from eru_allocator import paging

log = structlog.get_logger()

RESERVATIONS_SQL = """
SELECT r.tenant, r.node, r.cpu, r.memory, n.share_base FROM tenant_reservations r JOIN nodes n ON n.name = r.node
 WHERE n.pod = $1
"""
HELD_BY_NODE_SQL = """
SELECT tenant, node, resources, count(*) AS n FROM containers
 WHERE pod = $1 AND state NOT IN ('removed', 'failed', 'lost') AND replaces IS NULL
 GROUP BY tenant, node, resources
"""


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def instance_amount(resources: Any, config: PlanningConfig) -> Amount | None:
    """What one container with the stored requirement holds on its node (bound CPU pieces, memory bytes)."""
    try:
        need = normalize_request(ResourceRequest.model_validate(_loads(resources)), config, "resources")
    except (InvalidInput, ValueError):
        return None  # a record from an older model: not counted
    return Amount(need.cpu_request if need.cpu_bind else 0, need.memory_request)


@dataclass
class Fairness:
    """A pod's reservations (node → top-level tenant → amount) and, per (top-level tenant, node), what the tenant's
    live containers hold there."""

    reservations: dict[str, dict[str, Amount]] = field(default_factory=dict)
    held: dict[tuple[str, str], Amount] = field(default_factory=dict)


def tenant_totals(
    reservations: Mapping[str, Mapping[str, Amount]], held: Mapping[tuple[str, str], Amount], config: PlanningConfig
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per tenant: reserved in the pod and the part its containers use (cores, bytes as `Fraction`s). A batch passes
    its snapshot's, whose holdings include the requests planned earlier in the batch."""
    reserved: dict[str, dict[str, Fraction]] = {}
    used: dict[str, dict[str, Fraction]] = {}
    for node, per_tenant in reservations.items():
        for tenant, amount in per_tenant.items():
            in_use = amount.used_by(held.get((tenant, node), Amount()))
            _add(reserved.setdefault(tenant, {}), amount, config)
            _add(used.setdefault(tenant, {}), in_use, config)
    return reserved, used


def _add(target: dict[str, Fraction], amount: Amount, config: PlanningConfig) -> None:
    target["cpu"] = target.get("cpu", Fraction(0)) + Fraction(amount.cpu, config.share_base)
    target["memory"] = target.get("memory", Fraction(0)) + Fraction(amount.memory)


async def load(conn: Connection, pod: str, config: PlanningConfig) -> Fairness:
    """The pod's reservations and what each tenant holds per node (only read when the pod has reservations)."""
    return await from_rows(conn, pod, await conn.fetch(RESERVATIONS_SQL, pod), config)


async def from_rows(conn: Connection, pod: str, rows: Iterable[Any], config: PlanningConfig) -> Fairness:
    """`load` from the pod's reservation rows read already (tenant, node, cpu, memory): what each tenant holds per
    node is read only when there are any."""
    fairness = Fairness()
    for row in rows:
        pieces = cpu_to_pieces(str(row["cpu"]), config.share_base, "cpu")
        fairness.reservations.setdefault(row["node"], {})[row["tenant"]] = Amount(pieces, int(row["memory"]))
    if fairness.reservations:
        for row in await conn.fetch(HELD_BY_NODE_SQL, pod):
            amount = instance_amount(row["resources"], config)
            if amount is not None:
                key = (parent_of(row["tenant"]), row["node"])
                total = Amount(amount.cpu * int(row["n"]), amount.memory * int(row["n"]))
                fairness.held[key] = fairness.held.get(key, Amount()).plus(total)
    return fairness


# ---------------------------------------------------------------------------------------------------- operations
async def reserve(pool: asyncpg.Pool, req: TenantReserveRequest) -> OperationReply:
    """Set what `tenant` reserves on `node` (replacing an earlier reservation there); the node's reservations must
    fit its capacity. Nothing changes on an error."""
    if is_group(req.tenant):
        raise InvalidInput(
            "tenant", f"{req.tenant!r} is a group: reservations belong to its tenant {parent_of(req.tenant)!r}"
        )
    memory = parse_bytes(req.memory, "memory")
    async with transaction(pool) as conn:
        if await conn.fetchval("SELECT 1 FROM tenants WHERE name = $1", req.tenant) is None:
            raise NotFound("tenant", f"unknown tenant {req.tenant!r} (create it with `eru tenant create`)")
        node = await conn.fetchrow(
            "SELECT name, pod, cpu_map, memory, share_base FROM nodes WHERE name = $1 FOR UPDATE", req.node
        )
        if node is None:
            raise NotFound("node", f"unknown node {req.node!r}")
        share_base = int(node["share_base"] or 100)
        pieces = cpu_to_pieces(req.cpu, share_base, "cpu")
        if pieces < 0:
            raise InvalidInput("cpu", f"must be ≥ 0, got {req.cpu}")
        if memory < 0:
            raise InvalidInput("memory", f"must be ≥ 0, got {req.memory}")
        others: Any = await conn.fetchrow(
            "SELECT coalesce(sum(cpu), 0) AS cpu, coalesce(sum(memory), 0) AS memory FROM tenant_reservations"
            " WHERE node = $1 AND tenant <> $2",
            req.node,
            req.tenant,
        )
        capacity_cpu = Fraction(sum(_loads(node["cpu_map"]).values()), share_base)
        cpu = Fraction(pieces, share_base)
        if Fraction(str(others["cpu"])) + cpu > capacity_cpu:
            raise InvalidInput(
                "cpu",
                f"node {req.node!r} has {float(capacity_cpu):g} cores, {float(others['cpu']):g} reserved by others: "
                f"{float(cpu):g} more do not fit",
            )
        if int(others["memory"]) + memory > int(node["memory"]):
            raise InvalidInput(
                "memory",
                f"node {req.node!r} has {format_bytes(int(node['memory']))}, "
                f"{format_bytes(int(others['memory']))} reserved by others: {format_bytes(memory)} more do not fit",
            )
        await conn.execute(
            """INSERT INTO tenant_reservations (tenant, node, cpu, memory) VALUES ($1, $2, $3::numeric, $4)
               ON CONFLICT (tenant, node) DO UPDATE SET cpu = EXCLUDED.cpu, memory = EXCLUDED.memory,
                                                      updated_at = now()""",
            req.tenant,
            req.node,
            str(float(cpu)) if cpu.denominator != 1 else str(int(cpu)),
            memory,
        )
        await conn.execute("SELECT pg_notify('eru_admission', $1)", node["pod"])
    log.info("tenant.reserved", tenant=req.tenant, node=req.node, cpu=float(cpu), memory=memory)
    row = {"tenant": req.tenant, "node": req.node, "pod": node["pod"], "cpu": float(cpu), "memory": memory}
    return OperationReply(
        message=f"reserved {float(cpu):g} cores, {format_bytes(memory)} on {req.node} for {req.tenant}", rows=[row]
    )


async def unreserve(pool: asyncpg.Pool, req: TenantUnreserveRequest) -> OperationReply:
    """Drop `tenant`'s reservation on `node` (an error when there is none)."""
    async with transaction(pool) as conn:
        pod = await conn.fetchval(
            "DELETE FROM tenant_reservations r USING nodes n WHERE r.tenant = $1 AND r.node = $2 AND n.name = r.node"
            " RETURNING n.pod",
            req.tenant,
            req.node,
        )
        if pod is None:
            raise NotFound("node", f"tenant {req.tenant!r} has no reservation on node {req.node!r}")
        await conn.execute("SELECT pg_notify('eru_admission', $1)", pod)
    log.info("tenant.unreserved", tenant=req.tenant, node=req.node)
    return OperationReply(message=f"reservation of {req.tenant} on {req.node} removed")


async def list_reservations(
    pool: asyncpg.Pool, req: TenantReservationsRequest, config: PlanningConfig
) -> OperationReply:
    """A page of the reservations (of `tenant`, in `pod`) with what the tenant's containers use of them, ordered by
    tenant and node (docs/bus.md, paging)."""
    after = paging.decode_cursor(req.cursor, 2)
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            """SELECT r.tenant, r.node, n.pod, r.cpu, r.memory
                 FROM tenant_reservations r JOIN nodes n ON n.name = r.node
                WHERE ($1::text IS NULL OR r.tenant = $1) AND ($2::text IS NULL OR n.pod = $2)
                  AND ($4::text IS NULL OR (r.tenant, r.node) > ($4, $5))
                ORDER BY r.tenant, r.node LIMIT $3""",
            req.tenant,
            req.pod,
            req.limit + 1,
            *(after or (None, None)),
        )
        pods = sorted({row["pod"] for row in rows})
        used: dict[tuple[str, str], Amount] = {}
        for pod in pods:
            fairness = await load(conn, pod, config)
            for (tenant, node), held in fairness.held.items():
                reserved = fairness.reservations.get(node, {}).get(tenant)
                if reserved is not None:
                    used[(tenant, node)] = reserved.used_by(held)
    result = []
    for row in rows:
        in_use = used.get((row["tenant"], row["node"]), Amount())
        result.append(
            {
                "tenant": row["tenant"],
                "node": row["node"],
                "pod": row["pod"],
                "cpu": float(row["cpu"]),
                "memory": int(row["memory"]),
                "used_cpu": in_use.cpu / config.share_base,
                "used_memory": in_use.memory,
            }
        )
    page, cursor = paging.fit_page(result, req.limit, lambda row: [row["tenant"], row["node"]])
    return OperationReply(message=f"{len(page)} reservation(s)", rows=page, next_cursor=cursor)


async def serve_reservation_operations(
    serve: Callable[[str, type[Any], Callable[[Any], Awaitable[Any]]], Awaitable[None]],
    pool: asyncpg.Pool,
    config: PlanningConfig,
) -> None:
    """Answer `eru.allocator.tenant-reserve|tenant-unreserve|tenant-reservations` (queue group of the allocator)."""
    await serve(allocator_operation("tenant-reserve"), TenantReserveRequest, lambda r: reserve(pool, r))
    await serve(allocator_operation("tenant-unreserve"), TenantUnreserveRequest, lambda r: unreserve(pool, r))
    await serve(
        allocator_operation("tenant-reservations"),
        TenantReservationsRequest,
        lambda r: list_reservations(pool, r, config),
    )
