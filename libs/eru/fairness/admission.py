"""Which waiting deploy requests to admit next, in hierarchical DRF order (SPEC §8).

The allocator calls `admission_order` when requests contend (several waiting, or capacity just freed). The answer is
a decision over a snapshot, nothing is charged: the allocator then plans the admitted requests in the returned order
(each as one `plan_deploy`), and calls again when capacity frees or a wait times out.

Rules:
* Tenants take turns in DRF order (below quota first, then lowest weighted dominant share, then fewer allocations,
  then arrival of their oldest waiting request). Each admission is charged to its tenant before the next turn, so one
  flood cannot take everything.
* Within a tenant, requests go in arrival order: a tenant whose oldest request cannot go now (capacity or limit) is
  held for this round, so a big request is never overtaken by its own tenant's later small ones. Other tenants may
  still go (backfill across tenants).
* A request that can never go — its demand alone exceeds the tenant's limit or the pod's totals — is rejected with
  the numbers; one that merely has to wait says why (`capacity` or `limit`, with the numbers, or `queued` behind an
  earlier request of its tenant), so the allocator can fail it at once when its wait timeout is 0 (Eru's default).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from eru.errors import InvalidInput, PlanningFailure
from eru.fairness.drf import (
    ZERO,
    Resources,
    Tenant,
    TenantUsage,
    add,
    limit_excess,
    order_key,
    shortfall,
    subtract,
)


@dataclass(frozen=True, slots=True)
class PendingRequest:
    """A deploy request waiting for admission: its whole demand (all instances) and its arrival sequence number."""

    id: str
    tenant: str
    demand: Resources
    instances: int
    arrival: int


@dataclass(frozen=True, slots=True)
class Verdict:
    """Why a request was not admitted: `code` is `capacity`, `limit`, `queued` (waits) or `over_limit`,
    `over_totals` (rejected), with the numbers in `details`."""

    id: str
    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Admission:
    """Admitted ids in the order to plan them; waiting and rejected requests with their reasons."""

    admitted: list[str]
    waiting: list[Verdict]
    rejected: list[Verdict]


Fits = Callable[[PendingRequest, Resources], bool]


def _aggregate_fit(request: PendingRequest, free: Resources) -> bool:
    return not shortfall(free, request.demand)


def check_limit(tenant: Tenant, usage: TenantUsage, demand: Resources) -> None:
    """Raise `PlanningFailure` (code `tenant_limit`) naming each resource the demand would take over the limit."""
    excess = limit_excess(usage.allocated, demand, tenant.limit)
    if excess:
        parts = ", ".join(
            f"{name}: has {float(numbers['allocated']):g}, needs {float(numbers['need']):g} more, "
            f"limit {float(numbers['limit']):g}"
            for name, numbers in excess.items()
        )
        raise PlanningFailure(
            f"tenant {tenant.name!r} would exceed its limit ({parts})",
            code="tenant_limit",
            tenant=tenant.name,
            resources={name: {k: float(v) for k, v in numbers.items()} for name, numbers in excess.items()},
        )


def _never_fits(request: PendingRequest, tenant: Tenant, totals: Resources) -> Verdict | None:
    over_limit = limit_excess({}, request.demand, tenant.limit)
    if over_limit:
        return Verdict(request.id, "over_limit", f"demand alone exceeds tenant {tenant.name!r}'s limit", over_limit)
    over_totals = shortfall(totals, request.demand)
    if over_totals:
        return Verdict(request.id, "over_totals", "demand exceeds the pod's total resources", over_totals)
    return None


def admission_order(
    pending: Sequence[PendingRequest],
    tenants: Mapping[str, Tenant],
    usage: Mapping[str, TenantUsage],
    totals: Resources,
    free: Resources,
    *,
    fits: Fits | None = None,
) -> Admission:
    """Decide which of `pending` to admit now, in order, given each tenant's current `usage`, the pod's `totals` and
    its `free` resources. `fits` (default: demand ≤ free, resource-wise) lets the allocator use a node-level check."""
    fits = fits or _aggregate_fit
    queues: dict[str, deque[PendingRequest]] = {}
    rejected: list[Verdict] = []
    seen: set[str] = set()
    for index, request in enumerate(pending):
        if request.tenant not in tenants:
            raise InvalidInput(f"pending[{index}].tenant", f"unknown tenant {request.tenant!r}")
        if request.instances < 0:
            raise InvalidInput(f"pending[{index}].instances", f"must be ≥ 0, got {request.instances}")
        if request.id in seen:
            raise InvalidInput(f"pending[{index}].id", f"duplicate request id {request.id!r}")
        seen.add(request.id)
    for request in sorted(pending, key=lambda r: r.arrival):
        verdict = _never_fits(request, tenants[request.tenant], totals)
        if verdict is not None:
            rejected.append(verdict)
            continue
        queues.setdefault(request.tenant, deque()).append(request)

    state = {name: usage.get(name, TenantUsage()) for name in queues}
    free_now: dict[str, Fraction] = {name: free.get(name, ZERO) for name in set(free) | set(totals)}
    admitted: list[str] = []
    held: dict[str, Verdict] = {}
    while True:
        open_tenants = [name for name in queues if queues[name] and name not in held]
        if not open_tenants:
            break
        name = min(
            open_tenants,
            key=lambda n: order_key(tenants[n], state[n], totals, queues[n][0].arrival),
        )
        request = queues[name][0]
        excess = limit_excess(state[name].allocated, request.demand, tenants[name].limit)
        if excess:
            held[name] = Verdict(request.id, "limit", f"tenant {name!r} is at its limit", excess)
            continue
        if not fits(request, free_now):
            held[name] = Verdict(
                request.id, "capacity", "not enough free resources", shortfall(free_now, request.demand)
            )
            continue
        queues[name].popleft()
        admitted.append(request.id)
        state[name] = state[name].plus(request.demand, request.instances)
        free_now = subtract(free_now, request.demand)

    waiting: list[Verdict] = []
    for name, queue in queues.items():
        for position, request in enumerate(queue):
            if position == 0:
                waiting.append(held[name])
            else:
                waiting.append(Verdict(request.id, "queued", f"behind {queue[0].id!r} of tenant {name!r}"))
    arrival = {request.id: request.arrival for request in pending}
    waiting.sort(key=lambda verdict: arrival[verdict.id])
    return Admission(admitted=admitted, waiting=waiting, rejected=rejected)


def charge(usage: Mapping[str, TenantUsage], tenant: str, demand: Resources, instances: int) -> dict[str, TenantUsage]:
    """Usage after `tenant` was allocated `demand` (`instances` of them): what the allocator records on commit."""
    result = dict(usage)
    current = result.get(tenant, TenantUsage())
    result[tenant] = TenantUsage(add(current.allocated, demand), current.allocations + instances)
    return result
