"""Tenant operations (docs/fairness-and-scoring.md): `eru.allocator.tenant-create|tenant-set|tenant-rm|tenant-ls`,
over the accounting of `admission.accounting`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from fractions import Fraction
from typing import Any

import structlog

from eru.bus.subjects import allocator_operation
from eru.domain.messages import OperationReply
from eru.domain.tenants import TenantCreateRequest, TenantListRequest, TenantRemoveRequest, TenantSetRequest
from eru.errors import InvalidInput, NotFound
from eru.fairness import Tenant, TenantUsage, dominant_resource, dominant_share
from eru.fairness.ledger import Ledger, is_group, parent_of
from eru.fairness.quantities import json_number, parse_weight
from eru.fairness.tenant_config import (
    check_settings,
    parse_amounts,
    tenant_from_fields,
)
from eru.planning import NodeResources, PlanningConfig
from eru.store.tenants import TenantHoldings, TenantStore
from eru.units import format_bytes
from eru_allocator.admission import reservations
from eru_allocator.admission.accounting import DEFAULT_TENANT, pod_totals
from eru_allocator.operations import paging

log = structlog.get_logger()


async def create_tenant(store: TenantStore, req: TenantCreateRequest) -> OperationReply:
    """Create a tenant, or a group `tenant/group` of an existing tenant; an existing name is an error naming `name`
    (use tenant-set to change one)."""
    tenant = tenant_from_fields(req.name, req.weight, req.quota, req.limit)
    created = await store.create_tenant(tenant)
    if created == "unknown parent":
        parent = parent_of(tenant.name)
        raise InvalidInput("name", f"group of unknown tenant {parent!r} (create the tenant first)")
    if created == "exists":
        raise InvalidInput("name", f"tenant {req.name!r} exists (change it with `eru tenant set`)")
    log.info("tenant.created", tenant=tenant.name)
    group = is_group(tenant.name)
    return OperationReply(
        message=f"{'group' if group else 'tenant'} {tenant.name} created", rows=[_tenant_row(tenant, None, None)]
    )


async def _unknown(store: TenantStore, name: str) -> NotFound:
    known = await store.tenant_names(20)
    return NotFound("name", f"unknown tenant {name!r} (known: {', '.join(known) or 'none'})")


async def set_tenant(store: TenantStore, req: TenantSetRequest) -> OperationReply:
    """Change a tenant's weight, quota or limit; nothing changes when any field is invalid."""
    weight = None if req.weight is None else parse_weight(req.weight, "weight")
    quota = None if req.quota is None else parse_amounts(req.quota, "quota")
    limit = None if req.limit is None else parse_amounts(req.limit, "limit")

    def change(old: Tenant) -> Tenant:
        new = Tenant(
            old.name,
            old.weight if weight is None else weight,
            old.quota if quota is None else quota,
            old.limit if limit is None else limit,
        )
        check_settings(new)
        return new

    # a changed weight, quota or limit may let a waiting request in: the store wakes the admission loops
    new = await store.update_tenant(req.name, change)
    if new is None:
        raise await _unknown(store, req.name)
    log.info("tenant.updated", tenant=new.name)
    return OperationReply(message=f"tenant {new.name} updated", rows=[_tenant_row(new, None, None)])


def _removable(name: str, holdings: TenantHoldings) -> None:
    """Refuse (naming `name` and the numbers) to remove a tenant that still holds anything."""
    if holdings.live or holdings.waiting:
        raise InvalidInput(
            "name",
            f"tenant {name!r} still holds {holdings.live} live container(s) and {holdings.waiting} waiting "
            "request(s): remove them first (`eru container ls`, `eru container rm`)",
            containers=holdings.live,
            waiting=holdings.waiting,
        )
    if holdings.groups:
        raise InvalidInput("name", f"tenant {name!r} has groups ({', '.join(holdings.groups)}): remove them first")
    if holdings.reserved_nodes:
        raise InvalidInput(
            "name",
            f"tenant {name!r} reserves resources on {', '.join(holdings.reserved_nodes)}: `eru tenant unreserve` first",
        )


async def remove_tenant(store: TenantStore, req: TenantRemoveRequest) -> OperationReply:
    """Remove a tenant; refused (naming `name` and the numbers) for `default`, an unknown name, or a tenant that still
    holds live containers or has waiting requests: nothing is removed then."""
    if req.name == DEFAULT_TENANT:
        raise InvalidInput("name", f"the {DEFAULT_TENANT!r} tenant always exists and cannot be removed")
    if not await store.remove_tenant(req.name, lambda holdings: _removable(req.name, holdings)):
        raise await _unknown(store, req.name)
    log.info("tenant.removed", tenant=req.name)
    return OperationReply(message=f"tenant {req.name} removed")


async def list_tenants(
    store: TenantStore, req: TenantListRequest, config: PlanningConfig, down_after: float
) -> OperationReply:
    """Every tenant, its groups under it: weight, quota, limit, what it holds (a tenant: its whole tree), its
    weighted dominant share at its level against the pod's (or all pods') schedulable capacity, its waiting requests;
    with a pod, also its reservations, its quota guarantee left and the pod's headroom."""
    tenants = await store.tenant_configs()  # the default tenant created first when missing
    usage = await store.held_by_tenant(req.pod, config)
    nodes: list[NodeResources] = await store.schedulable_capacity(req.pod or None, down_after)
    waiting = await store.waiting_by_tenant(req.pod)
    fairness = await store.pod_reservations(req.pod, config) if req.pod else None
    totals, free = pod_totals(nodes, config)
    reserved, reserved_used = (
        ({}, {}) if fairness is None else reservations.tenant_totals(fairness.reservations, fairness.held, config)
    )
    ledger = Ledger(tenants, totals, free, usage, reserved=reserved, reserved_used=reserved_used)
    rows = []
    for name in sorted(n for n in tenants if not is_group(n)):
        tenant = tenants[name]
        groups = sorted(n for n in tenants if is_group(n) and parent_of(n) == name)
        row = _tenant_row(tenant, ledger.rolled(name), totals)
        row["level"] = 1
        row["waiting"] = sum(waiting.get(leaf, 0) for leaf in (name, *groups))
        if req.pod:
            row["reserved"] = _amounts(reserved.get(name, {}))
            row["guarantee_left"] = _amounts(ledger.guarantee_left(name))
        rows.append(row)
        for group in groups:
            group_row = _tenant_row(tenants[group], usage.get(group, TenantUsage()), totals)
            group_row.update(level=2, parent=name, waiting=waiting.get(group, 0))
            rows.append(group_row)
    unknown = sorted(set(usage) - set(tenants))
    warnings = [f"containers of unknown tenant {name!r} (created before tenants were enforced)" for name in unknown]
    message = f"{req.pod or 'all pods'}: {float(totals['cpu']):g} cores, {format_bytes(int(totals['memory']))}"
    headroom = ledger.headroom() if req.pod else {}
    if headroom:
        message += "; headroom " + ", ".join(
            f"{name} {_text(name, numbers['required'])} held of {_text(name, numbers['available'])} unreserved free"
            for name, numbers in headroom.items()
        )
    after = paging.decode_cursor(req.cursor, 2)
    if after is not None:
        rows = [row for row in rows if _tenant_key(row) > after]
    page, cursor = paging.fit_page(rows, req.limit, _tenant_key)
    return OperationReply(message=message, rows=page, warnings=warnings, next_cursor=cursor)


def _tenant_key(row: Mapping[str, Any]) -> list[str]:
    """A tenant-ls row's place in the listing: a tenant is (name, ""), its group (tenant, group), so a tenant's
    groups follow it and a page's cursor continues after any row (docs/bus.md, paging)."""
    return [str(row["parent"]), str(row["name"])] if row.get("level") == 2 else [str(row["name"]), ""]


def _text(resource: str, amount: Fraction) -> str:
    return format_bytes(int(amount)) if resource == "memory" else f"{float(amount):g} cores"


def _amounts(amounts: Mapping[str, Fraction]) -> dict[str, int | float]:
    return {name: json_number(amount) for name, amount in amounts.items()}


def _tenant_row(tenant: Tenant, usage: TenantUsage | None, totals: Mapping[str, Fraction] | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": tenant.name,
        "weight": json_number(tenant.weight),
        "quota": _amounts(tenant.quota),
        "limit": _amounts(tenant.limit),
    }
    if usage is not None and totals is not None:
        row["allocated"] = _amounts(usage.allocated)
        row["allocations"] = usage.allocations
        row["dominant_share"] = float(dominant_share(usage.allocated, totals, tenant.weight))
        row["dominant_resource"] = dominant_resource(usage.allocated, totals)
    return row


async def serve_tenant_operations(
    serve: Callable[[str, type[Any], Callable[[Any], Awaitable[Any]]], Awaitable[None]],
    store: TenantStore,
    config: PlanningConfig,
    down_after: float,
) -> None:
    """Answer `eru.allocator.tenant-create|tenant-set|tenant-ls|tenant-rm` (queue group of the allocator) through
    the tenants capability."""
    await serve(allocator_operation("tenant-create"), TenantCreateRequest, lambda r: create_tenant(store, r))
    await serve(allocator_operation("tenant-set"), TenantSetRequest, lambda r: set_tenant(store, r))
    await serve(allocator_operation("tenant-rm"), TenantRemoveRequest, lambda r: remove_tenant(store, r))
    await serve(
        allocator_operation("tenant-ls"), TenantListRequest, lambda r: list_tenants(store, r, config, down_after)
    )
