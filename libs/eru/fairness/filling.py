"""Progressive filling in hierarchical DRF order (docs/fairness-and-scoring.md; `eru plan` kind "drf",
docs/planning.md).

Each step gives one task to the leaf served next (`Ledger.pick`: the tenant first, then its group) if its next task
still fits: within the pod's free resources (minus the other tenants' unused reservations), within the tenant's
limit, without eating into the headroom held for other tenants' quota guarantees, and under its `max_tasks`. A leaf
whose next task does not fit is done for good (free resources only shrink, allocations only grow, and the headroom
spare — unreserved free minus the guarantees left — never grows), so the filling ends when no leaf can take one more
task. This is the DRF paper's progressive filling, except that a blocked tenant is skipped rather than ending
the run; in the canonical example both stop together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from eru.errors import InvalidInput
from eru.fairness.drf import Resources, Tenant, TenantUsage, add, check_tenant, dominant_share, shortfall
from eru.fairness.ledger import Ledger, check_groups, is_group, parent_of
from eru.fairness.quantities import json_details

MAX_STEPS = 200_000
"""Most tasks one filling may hand out: a demand tiny against the totals would otherwise loop for hours."""


@dataclass(frozen=True, slots=True)
class FillingTenant:
    """A tenant or group (`tenant/group`) with the resources of one of its tasks (`demand`; None for a tenant that
    only holds groups), an optional cap on tasks, and what the tenant reserved in the pod (`reserved`)."""

    tenant: Tenant
    demand: Resources | None
    max_tasks: int | None = None
    reserved: Resources = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FillingResult:
    """The outcome: tasks and shares per tenant and group, the order tasks were handed out, why each stopped, the
    weighted dominant shares after every step (for plots) and the quota headroom at the end."""

    tasks: dict[str, int]
    allocated: dict[str, dict[str, Fraction]]
    shares: dict[str, Fraction]
    dominant_shares: dict[str, Fraction]
    order: list[str]
    stopped: dict[str, dict[str, Any]]
    history: list[dict[str, Fraction]] = field(default_factory=list)
    headroom: dict[str, dict[str, Fraction]] = field(default_factory=dict)


def _check(totals: Resources, tenants: Sequence[FillingTenant]) -> None:
    if not totals:
        raise InvalidInput("totals", "needs at least one resource")
    for name, amount in totals.items():
        if amount < 0:
            raise InvalidInput(f"totals.{name}", f"must be ≥ 0, got {amount}")
    seen: set[str] = set()
    names = {entry.tenant.name for entry in tenants}
    for index, entry in enumerate(tenants):
        where = f"tenants[{index}]"
        if not entry.tenant.name:
            raise InvalidInput(f"{where}.name", "must be a non-empty string")
        if entry.tenant.name in seen:
            raise InvalidInput(f"{where}.name", f"duplicate tenant {entry.tenant.name!r}")
        seen.add(entry.tenant.name)
        check_tenant(entry.tenant, totals, where)
        if is_group(entry.tenant.name) and entry.reserved:
            raise InvalidInput(f"{where}.reserved", "reservations belong to a tenant, not to a group")
        for name in entry.reserved:
            if name not in totals:
                raise InvalidInput(f"{where}.reserved.{name}", f"unknown resource (totals have {sorted(totals)})")
        if entry.demand is None:
            if not any(is_group(other) and parent_of(other) == entry.tenant.name for other in names):
                raise InvalidInput(f"{where}.demand", "required: the resources of one task")
            continue
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
    by_name = {entry.tenant.name: entry.tenant for entry in tenants}
    check_groups({**{parent_of(name): Tenant(parent_of(name)) for name in by_name}, **by_name})
    reserved_total: dict[str, Fraction] = {}
    for entry in tenants:
        reserved_total = add(reserved_total, entry.reserved)
    over = shortfall(totals, reserved_total)
    if over:
        raise InvalidInput("tenants", f"reservations exceed the totals: {json_details(over)}")


def _why_blocked(entry: FillingTenant, ledger: Ledger, tasks: int) -> dict[str, Any] | None:
    if entry.max_tasks is not None and tasks >= entry.max_tasks:
        return {"reason": "max_tasks", "max_tasks": entry.max_tasks}
    assert entry.demand is not None  # only leaves with a demand are filled
    blocked = ledger.blocked(entry.tenant.name, entry.demand)
    if blocked is None:
        return None
    if blocked.code == "headroom":
        return {"reason": "headroom", **blocked.details}
    return {"reason": blocked.code, "resources": blocked.details}


def progressive_filling(
    totals: Resources, tenants: Sequence[FillingTenant], *, max_steps: int = MAX_STEPS
) -> FillingResult:
    """Hand out tasks one at a time in two-level DRF order until no leaf's next task fits."""
    _check(totals, tenants)
    by_name = {entry.tenant.name: entry for entry in tenants}
    settings = {parent_of(name): Tenant(parent_of(name)) for name in by_name}
    settings.update({name: entry.tenant for name, entry in by_name.items()})
    reserved = {name: dict(entry.reserved) for name, entry in by_name.items() if entry.reserved}
    ledger = Ledger(settings, totals, totals, {}, reserved=reserved)
    tasks = dict.fromkeys(by_name, 0)
    active = {name: index for index, (name, entry) in enumerate(by_name.items()) if entry.demand is not None}
    stopped: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    history: list[dict[str, Fraction]] = []
    while active:
        name = ledger.pick(active)
        entry = by_name[name]
        blocked = _why_blocked(entry, ledger, tasks[name])
        if blocked is not None:
            stopped[name] = blocked
            del active[name]
            continue
        if len(order) >= max_steps:
            raise InvalidInput("tenants", f"more than {max_steps} tasks would be handed out; use larger demands")
        assert entry.demand is not None
        ledger.charge(name, entry.demand, 1)
        tasks[name] += 1
        order.append(name)
        history.append({other: _share(other, ledger) for other in by_name})
    return FillingResult(
        tasks=tasks,
        allocated={name: dict(_usage(name, ledger).allocated) for name in by_name},
        shares={name: _share(name, ledger) for name in by_name},
        dominant_shares={name: dominant_share(_usage(name, ledger).allocated, totals) for name in by_name},
        order=order,
        stopped=stopped,
        history=history,
        headroom=ledger.headroom(),
    )


def _usage(name: str, ledger: Ledger) -> TenantUsage:
    return ledger.usage.get(name, TenantUsage()) if is_group(name) else ledger.rolled(name)


def _share(name: str, ledger: Ledger) -> Fraction:
    return dominant_share(_usage(name, ledger).allocated, ledger.totals, ledger.tenant(name).weight)
