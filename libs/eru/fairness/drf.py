"""Dominant shares and the hierarchical DRF order (docs/fairness-and-scoring.md).

Quantities are exact `Fraction`s keyed by resource name ("cpu" in cores, "memory" in bytes, any other name in its own
unit), so that equal shares compare equal and every tie is broken by the rule, never by float rounding.

Order (smallest key first): tenants below their guaranteed quota, then every tenant by lowest weighted dominant
share; ties by fewer allocations so far, then earlier arrival.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from eru.errors import InvalidInput

Resources = Mapping[str, Fraction]
"""Per resource name, an exact non-negative amount."""

ZERO = Fraction(0)


@dataclass(frozen=True, slots=True)
class Tenant:
    """Who owns workloads: a fairness `weight` (> 0), a guaranteed `quota` and a `limit` per resource.

    A resource missing from `quota` has no guarantee; one missing from `limit` is unlimited.
    """

    name: str
    weight: Fraction = Fraction(1)
    quota: Resources = field(default_factory=dict)
    limit: Resources = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TenantUsage:
    """What a tenant holds now: resources allocated and how many allocations (instances) they are."""

    allocated: Resources = field(default_factory=dict)
    allocations: int = 0

    def plus(self, demand: Resources, allocations: int) -> TenantUsage:
        """This usage with `demand` (made of `allocations` instances) added."""
        return TenantUsage(add(self.allocated, demand), self.allocations + allocations)


def add(left: Resources, right: Resources) -> dict[str, Fraction]:
    """Resource-wise sum."""
    total = dict(left)
    for name, amount in right.items():
        total[name] = total.get(name, ZERO) + amount
    return total


def subtract(left: Resources, right: Resources) -> dict[str, Fraction]:
    """Resource-wise difference (may go negative: callers check fit first)."""
    rest = dict(left)
    for name, amount in right.items():
        rest[name] = rest.get(name, ZERO) - amount
    return rest


def check_tenant(tenant: Tenant, totals: Resources, field_name: str) -> None:
    """`InvalidInput` naming the field when a weight is not positive or a quota/limit names an unknown resource or
    is negative."""
    if tenant.weight <= 0:
        raise InvalidInput(f"{field_name}.weight", f"must be > 0, got {tenant.weight}")
    for part, amounts in (("quota", tenant.quota), ("limit", tenant.limit)):
        for name, amount in amounts.items():
            if name not in totals:
                raise InvalidInput(f"{field_name}.{part}.{name}", f"unknown resource (totals have {sorted(totals)})")
            if amount < 0:
                raise InvalidInput(f"{field_name}.{part}.{name}", f"must be ≥ 0, got {amount}")


def dominant_share(allocated: Resources, totals: Resources, weight: Fraction = Fraction(1)) -> Fraction:
    """max over resources of allocated / total, divided by `weight` (resources with total 0 are skipped)."""
    share = ZERO
    for name, total in totals.items():
        if total > 0:
            share = max(share, allocated.get(name, ZERO) / total)
    return share / weight


def dominant_resource(allocated: Resources, totals: Resources) -> str | None:
    """The resource behind the dominant share (first in `totals` order on ties); None when nothing is allocated."""
    best: str | None = None
    best_share = ZERO
    for name, total in totals.items():
        if total > 0:
            share = allocated.get(name, ZERO) / total
            if share > best_share:
                best, best_share = name, share
    return best


def below_quota(allocated: Resources, quota: Resources) -> bool:
    """True while some resource with a guaranteed quota is allocated below it (Mesos: the guarantee is unmet)."""
    return any(allocated.get(name, ZERO) < amount for name, amount in quota.items() if amount > 0)


def limit_excess(allocated: Resources, demand: Resources, limit: Resources) -> dict[str, dict[str, Fraction]]:
    """The resources on which allocated + demand would exceed the limit, with the numbers; {} when within."""
    excess: dict[str, dict[str, Fraction]] = {}
    for name, cap in limit.items():
        after = allocated.get(name, ZERO) + demand.get(name, ZERO)
        if after > cap and demand.get(name, ZERO) > 0:
            excess[name] = {"limit": cap, "allocated": allocated.get(name, ZERO), "need": demand.get(name, ZERO)}
    return excess


def shortfall(free: Resources, demand: Resources) -> dict[str, dict[str, Fraction]]:
    """The resources on which `demand` exceeds `free`, with the numbers; {} when it fits."""
    return {
        name: {"need": amount, "available": free.get(name, ZERO)}
        for name, amount in demand.items()
        if amount > free.get(name, ZERO)
    }


def order_key(tenant: Tenant, usage: TenantUsage, totals: Resources, arrival: int) -> tuple[int, Fraction, int, int]:
    """The hierarchical DRF sort key: (0 below quota else 1, weighted dominant share, allocations, arrival)."""
    return (
        0 if below_quota(usage.allocated, tenant.quota) else 1,
        dominant_share(usage.allocated, totals, tenant.weight),
        usage.allocations,
        arrival,
    )


def drf_order(tenants: Sequence[Tenant], usage: Mapping[str, TenantUsage], totals: Resources) -> list[str]:
    """Tenant names in the order DRF serves them now; arrival = position in `tenants`; missing usage = nothing."""
    empty = TenantUsage()
    keyed = [
        (order_key(tenant, usage.get(tenant.name, empty), totals, arrival), tenant.name)
        for arrival, tenant in enumerate(tenants)
    ]
    return [name for _, name in sorted(keyed)]
