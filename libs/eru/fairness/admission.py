"""Which waiting deploy requests to admit next, in hierarchical DRF order (docs/fairness-and-scoring.md).

The allocator calls `admission_order` when requests contend (several waiting, or capacity just freed). The answer is
a decision over a snapshot, nothing is charged: the allocator then plans the admitted requests in the returned order
(each as one `plan_deploy`), and calls again when capacity frees or a wait times out.

Rules:
* Tenants take turns in two-level DRF order (`eru.fairness.ledger`): the tenant first (below its quota guarantee
  first, then lowest weighted dominant share of its whole tree, then fewer allocations, then arrival of its oldest
  waiting request), then the leaf within it (the tenant's own requests or one of its groups, `tenant/group`, by the
  group's weighted dominant share). Each admission is charged before the next turn, so one flood cannot take
  everything.
* Within a leaf, requests go in arrival order: a leaf whose oldest request cannot go now (capacity, limit or the
  quota headroom) is held for this round, so a big request is never overtaken by its own leaf's later small ones.
  Other leaves may still go (backfill).
* Headroom: the pod keeps unreserved free resources for every tenant's quota guarantee left; a request that would
  eat into another tenant's guarantee waits with code `headroom`, naming that tenant.
* A request that can never go — its demand alone exceeds the tenant's limit, or what it reserves the pod's totals —
  is rejected with the numbers; one that merely has to wait says why (`capacity` or `limit`, with the numbers, or
  `queued` behind an earlier request of its tenant), so the allocator can fail it at once when its wait timeout is 0
  (Eru's default).
* Demand is requested (CPU bound or not), what a request reserves is what nodes hold for it (bound cores, memory):
  limits, quota and shares count the first, capacity and headroom the second (`PendingRequest`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from eru.errors import InvalidInput, PlanningFailure
from eru.fairness.drf import Resources, Tenant, TenantUsage, add, limit_excess, shortfall
from eru.fairness.ledger import Blocked, Ledger, check_groups, parent_of


@dataclass(frozen=True, slots=True)
class PendingRequest:
    """A deploy request waiting for admission: its whole demand (all instances) and its arrival sequence number.

    `demand` is what its tenant is charged (requested CPU, bound or not; memory): limits, quota and shares count it.
    `reserves` is the part taken from the pod's free resources (bound cores, memory): capacity and headroom count it,
    since unbound CPU may be oversold on a node (docs/fairness-and-scoring.md). None: all of `demand`."""

    id: str
    tenant: str
    demand: Resources
    instances: int
    arrival: int
    reserves: Resources | None = None

    @property
    def takes(self) -> Resources:
        """What the request takes from the pod's free resources."""
        return self.demand if self.reserves is None else self.reserves


@dataclass(frozen=True, slots=True)
class Verdict:
    """Why a request was not admitted: `code` is `capacity`, `limit`, `headroom`, `queued` (waits) or `over_limit`,
    `over_totals` (rejected), with the numbers in `details`."""

    id: str
    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Admission:
    """Admitted ids in the order to plan them; waiting and rejected requests with their reasons; the headroom
    (per guaranteed resource: required, available) after the admissions."""

    admitted: list[str]
    waiting: list[Verdict]
    rejected: list[Verdict]
    headroom: dict[str, dict[str, Fraction]] = field(default_factory=dict)


Fits = Callable[[PendingRequest, Resources], bool]


def _aggregate_fit(request: PendingRequest, free: Resources) -> bool:
    return not shortfall(free, request.takes)


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
    over_totals = shortfall(totals, request.takes)
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
    reserved: Mapping[str, Resources] | None = None,
    reserved_used: Mapping[str, Resources] | None = None,
) -> Admission:
    """Decide which of `pending` to admit now, in order, given each leaf's current `usage` (a tenant's own requests
    or a group's, `tenant/group`), the pod's `totals` and its `free` resources, and per tenant what it `reserved` in
    the pod and how much of that its containers use (`reserved_used`). `fits` (default: demand ≤ free,
    resource-wise) lets the allocator use a node-level check."""
    fits = fits or _aggregate_fit
    check_groups(tenants)
    queues: dict[str, deque[PendingRequest]] = {}
    rejected: list[Verdict] = []
    seen: set[str] = set()
    for index, request in enumerate(pending):
        if request.tenant not in tenants or parent_of(request.tenant) not in tenants:
            raise InvalidInput(f"pending[{index}].tenant", f"unknown tenant {request.tenant!r}")
        if request.instances < 0:
            raise InvalidInput(f"pending[{index}].instances", f"must be ≥ 0, got {request.instances}")
        if request.id in seen:
            raise InvalidInput(f"pending[{index}].id", f"duplicate request id {request.id!r}")
        seen.add(request.id)
    for request in sorted(pending, key=lambda r: r.arrival):
        verdict = _never_fits(request, tenants[parent_of(request.tenant)], totals)
        if verdict is not None:
            rejected.append(verdict)
            continue
        queues.setdefault(request.tenant, deque()).append(request)

    ledger = Ledger(tenants, totals, free, usage, reserved=reserved, reserved_used=reserved_used)
    admitted: list[str] = []
    held: dict[str, Verdict] = {}
    while True:
        arrivals = {leaf: queue[0].arrival for leaf, queue in queues.items() if queue and leaf not in held}
        if not arrivals:
            break
        leaf = ledger.pick(arrivals)
        request = queues[leaf][0]
        blocked = ledger.blocked(leaf, request.demand, request.takes)
        if blocked is None and not fits(request, ledger.unreserved_free(exclude=parent_of(leaf))):
            blocked = Blocked("capacity", "not enough free resources", shortfall(ledger.free, request.takes))
        if blocked is not None:
            held[leaf] = Verdict(request.id, blocked.code, blocked.message, blocked.details)
            continue
        queues[leaf].popleft()
        admitted.append(request.id)
        ledger.charge(leaf, request.demand, request.instances, request.takes)

    waiting: list[Verdict] = []
    for leaf, queue in queues.items():
        for position, request in enumerate(queue):
            if position == 0:
                waiting.append(held[leaf])
            else:
                waiting.append(Verdict(request.id, "queued", f"behind {queue[0].id!r} of {leaf!r}"))
    arrival = {request.id: request.arrival for request in pending}
    waiting.sort(key=lambda verdict: arrival[verdict.id])
    return Admission(admitted=admitted, waiting=waiting, rejected=rejected, headroom=ledger.headroom())


def charge(usage: Mapping[str, TenantUsage], tenant: str, demand: Resources, instances: int) -> dict[str, TenantUsage]:
    """Usage after `tenant` was allocated `demand` (`instances` of them): what the allocator records on commit."""
    result = dict(usage)
    current = result.get(tenant, TenantUsage())
    result[tenant] = TenantUsage(add(current.allocated, demand), current.allocations + instances)
    return result
