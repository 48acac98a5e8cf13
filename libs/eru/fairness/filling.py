"""Progressive filling in hierarchical DRF order (SPEC §8, §10 kind "drf").

Each step gives one task to the first tenant in DRF order whose next task still fits: within the pod's free
resources, within the tenant's limit and under its `max_tasks`. A tenant whose next task does not fit is done for
good (free resources only shrink and its own allocation only grows), so the filling ends when no tenant can take one
more task. This is the DRF paper's progressive filling, except that a blocked tenant is skipped rather than ending
the run; in the canonical example both stop together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from eru.errors import InvalidInput
from eru.fairness.drf import (
    Resources,
    Tenant,
    TenantUsage,
    check_tenant,
    dominant_share,
    limit_excess,
    order_key,
    shortfall,
    subtract,
)

MAX_STEPS = 200_000
"""Most tasks one filling may hand out: a demand tiny against the totals would otherwise loop for hours."""


@dataclass(frozen=True, slots=True)
class FillingTenant:
    """A tenant with the resources of one of its tasks (`demand`) and an optional cap on tasks."""

    tenant: Tenant
    demand: Resources
    max_tasks: int | None = None


@dataclass(frozen=True, slots=True)
class FillingResult:
    """The outcome: tasks and shares per tenant, the order tasks were handed out, why each tenant stopped, and the
    weighted dominant shares after every step (for plots)."""

    tasks: dict[str, int]
    allocated: dict[str, dict[str, Fraction]]
    shares: dict[str, Fraction]
    dominant_shares: dict[str, Fraction]
    order: list[str]
    stopped: dict[str, dict[str, Any]]
    history: list[dict[str, Fraction]] = field(default_factory=list)


def _check(totals: Resources, tenants: Sequence[FillingTenant]) -> None:
    if not totals:
        raise InvalidInput("totals", "needs at least one resource")
    for name, amount in totals.items():
        if amount < 0:
            raise InvalidInput(f"totals.{name}", f"must be ≥ 0, got {amount}")
    seen: set[str] = set()
    for index, entry in enumerate(tenants):
        where = f"tenants[{index}]"
        if not entry.tenant.name:
            raise InvalidInput(f"{where}.name", "must be a non-empty string")
        if entry.tenant.name in seen:
            raise InvalidInput(f"{where}.name", f"duplicate tenant {entry.tenant.name!r}")
        seen.add(entry.tenant.name)
        check_tenant(entry.tenant, totals, where)
        for name, amount in entry.demand.items():
            if name not in totals:
                raise InvalidInput(f"{where}.demand.{name}", f"unknown resource (totals have {sorted(totals)})")
            if amount < 0:
                raise InvalidInput(f"{where}.demand.{name}", f"must be ≥ 0, got {amount}")
        if not any(amount > 0 and totals[name] > 0 for name, amount in entry.demand.items()):
            raise InvalidInput(
                f"{where}.demand", "a task must need some of a resource the pod has (else it never ends)"
            )
        if entry.max_tasks is not None and entry.max_tasks < 0:
            raise InvalidInput(f"{where}.max_tasks", f"must be ≥ 0 or null, got {entry.max_tasks}")


def _why_blocked(entry: FillingTenant, usage: TenantUsage, free: Resources, tasks: int) -> dict[str, Any] | None:
    if entry.max_tasks is not None and tasks >= entry.max_tasks:
        return {"reason": "max_tasks", "max_tasks": entry.max_tasks}
    excess = limit_excess(usage.allocated, entry.demand, entry.tenant.limit)
    if excess:
        return {"reason": "limit", "resources": excess}
    short = shortfall(free, entry.demand)
    if short:
        return {"reason": "capacity", "resources": short}
    return None


def progressive_filling(
    totals: Resources, tenants: Sequence[FillingTenant], *, max_steps: int = MAX_STEPS
) -> FillingResult:
    """Hand out tasks one at a time in hierarchical DRF order until no tenant's next task fits."""
    _check(totals, tenants)
    usage = {entry.tenant.name: TenantUsage() for entry in tenants}
    tasks = dict.fromkeys(usage, 0)
    free: Resources = dict(totals)
    active = list(range(len(tenants)))
    stopped: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    history: list[dict[str, Fraction]] = []
    while active:
        active.sort(key=lambda i: order_key(tenants[i].tenant, usage[tenants[i].tenant.name], totals, i))
        chosen = None
        for index in active:
            entry = tenants[index]
            name = entry.tenant.name
            blocked = _why_blocked(entry, usage[name], free, tasks[name])
            if blocked is None:
                chosen = entry
                break
            stopped[name] = blocked
        else:
            active = []
        if chosen is None:
            break
        if len(order) >= max_steps:
            raise InvalidInput("tenants", f"more than {max_steps} tasks would be handed out; use larger demands")
        name = chosen.tenant.name
        usage[name] = usage[name].plus(chosen.demand, 1)
        tasks[name] += 1
        free = subtract(free, chosen.demand)
        order.append(name)
        history.append({entry.tenant.name: _share(entry, usage, totals) for entry in tenants})
        # Tenants found blocked before the chosen one stay blocked: drop them, keep the rest.
        active = [i for i in active if tenants[i].tenant.name not in stopped]
    return FillingResult(
        tasks=tasks,
        allocated={name: dict(state.allocated) for name, state in usage.items()},
        shares={entry.tenant.name: _share(entry, usage, totals) for entry in tenants},
        dominant_shares={name: dominant_share(state.allocated, totals) for name, state in usage.items()},
        order=order,
        stopped=stopped,
        history=history,
    )


def _share(entry: FillingTenant, usage: dict[str, TenantUsage], totals: Resources) -> Fraction:
    return dominant_share(usage[entry.tenant.name].allocated, totals, entry.tenant.weight)
