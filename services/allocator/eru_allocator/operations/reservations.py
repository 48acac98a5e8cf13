"""Reservation operations (docs/fairness-and-scoring.md): `eru.allocator.tenant-reserve|tenant-unreserve|
tenant-reservations` manage the `tenant_reservations` table (migration 0035) through the operations capability of the
store (`eru.store.operations`); `admission.reservations` reads it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from fractions import Fraction
from typing import Any

import structlog

from eru.bus.subjects import allocator_operation
from eru.domain.messages import OperationReply
from eru.domain.tenants import TenantReservationsRequest, TenantReserveRequest, TenantUnreserveRequest
from eru.errors import InvalidInput, NotFound
from eru.fairness.ledger import is_group, parent_of
from eru.planning import PlanningConfig
from eru.planning.reservations import Amount
from eru.store.operations import OperationStore
from eru.units import cpu_to_pieces, format_bytes, parse_bytes
from eru_allocator.operations import paging

log = structlog.get_logger()


async def reserve(store: OperationStore, req: TenantReserveRequest) -> OperationReply:
    """Set what `tenant` reserves on `node` (replacing an earlier reservation there); the node's reservations must
    fit its capacity. Nothing changes on an error."""
    if is_group(req.tenant):
        raise InvalidInput(
            "tenant", f"{req.tenant!r} is a group: reservations belong to its tenant {parent_of(req.tenant)!r}"
        )
    memory = parse_bytes(req.memory, "memory")
    async with store.operation() as work:
        if not await work.tenant_exists(req.tenant):
            raise NotFound("tenant", f"unknown tenant {req.tenant!r} (create it with `eru tenant create`)")
        node = await work.lock_node(req.node)
        if node is None:
            raise NotFound("node", f"unknown node {req.node!r}")
        share_base = node.share_base
        pieces = cpu_to_pieces(req.cpu, share_base, "cpu")
        if pieces < 0:
            raise InvalidInput("cpu", f"must be ≥ 0, got {req.cpu}")
        if memory < 0:
            raise InvalidInput("memory", f"must be ≥ 0, got {req.memory}")
        others = await work.reserved_by_others(req.node, req.tenant)
        capacity_cpu = Fraction(sum(node.cpu_map.values()), share_base)
        cpu = Fraction(pieces, share_base)
        if others.cpu + cpu > capacity_cpu:
            raise InvalidInput(
                "cpu",
                f"node {req.node!r} has {float(capacity_cpu):g} cores, {float(others.cpu):g} reserved by others: "
                f"{float(cpu):g} more do not fit",
            )
        if others.memory + memory > node.memory:
            raise InvalidInput(
                "memory",
                f"node {req.node!r} has {format_bytes(node.memory)}, "
                f"{format_bytes(others.memory)} reserved by others: {format_bytes(memory)} more do not fit",
            )
        cpu_text = str(float(cpu)) if cpu.denominator != 1 else str(int(cpu))
        await work.put_reservation(req.tenant, req.node, cpu_text, memory)
        await work.wake_admission(node.pod)
    log.info("tenant.reserved", tenant=req.tenant, node=req.node, cpu=float(cpu), memory=memory)
    row = {"tenant": req.tenant, "node": req.node, "pod": node.pod, "cpu": float(cpu), "memory": memory}
    return OperationReply(
        message=f"reserved {float(cpu):g} cores, {format_bytes(memory)} on {req.node} for {req.tenant}", rows=[row]
    )


async def unreserve(store: OperationStore, req: TenantUnreserveRequest) -> OperationReply:
    """Drop `tenant`'s reservation on `node` (an error when there is none)."""
    async with store.operation() as work:
        pod = await work.drop_reservation(req.tenant, req.node)
        if pod is None:
            raise NotFound("node", f"tenant {req.tenant!r} has no reservation on node {req.node!r}")
        await work.wake_admission(pod)
    log.info("tenant.unreserved", tenant=req.tenant, node=req.node)
    return OperationReply(message=f"reservation of {req.tenant} on {req.node} removed")


async def list_reservations(
    store: OperationStore, req: TenantReservationsRequest, config: PlanningConfig
) -> OperationReply:
    """A page of the reservations (of `tenant`, in `pod`) with what the tenant's containers use of them, ordered by
    tenant and node (docs/bus.md, paging)."""
    after = paging.decode_cursor(req.cursor, 2)
    async with store.operation() as work:
        listed = await work.reservation_page(
            req.tenant, req.pod, req.limit + 1, None if after is None else (after[0], after[1])
        )
        used: dict[tuple[str, str], Amount] = {}
        for pod in sorted({row.pod for row in listed}):
            used.update(await work.reservation_use(pod, config))
    result = []
    for item in listed:
        in_use = used.get((item.tenant, item.node), Amount())
        result.append(
            {
                "tenant": item.tenant,
                "node": item.node,
                "pod": item.pod,
                "cpu": item.cpu,
                "memory": item.memory,
                "used_cpu": in_use.cpu / config.share_base,
                "used_memory": in_use.memory,
            }
        )
    page, cursor = paging.fit_page(result, req.limit, lambda row: [row["tenant"], row["node"]])
    return OperationReply(message=f"{len(page)} reservation(s)", rows=page, next_cursor=cursor)


async def serve_reservation_operations(
    serve: Callable[[str, type[Any], Callable[[Any], Awaitable[Any]]], Awaitable[None]],
    store: OperationStore,
    config: PlanningConfig,
) -> None:
    """Answer `eru.allocator.tenant-reserve|tenant-unreserve|tenant-reservations` (queue group of the allocator)."""
    await serve(allocator_operation("tenant-reserve"), TenantReserveRequest, lambda r: reserve(store, r))
    await serve(allocator_operation("tenant-unreserve"), TenantUnreserveRequest, lambda r: unreserve(store, r))
    await serve(
        allocator_operation("tenant-reservations"),
        TenantReservationsRequest,
        lambda r: list_reservations(store, r, config),
    )
