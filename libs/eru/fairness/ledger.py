"""One pod's fairness state for a decision: two-level DRF order, limits, quota guarantees with headroom, reservations.

Seed 004 (Mesos' hierarchical allocator), in eru's words (docs/fairness-and-scoring.md):

* **Two levels.** A tenant (`team-a`) may contain groups (`team-a/web`); requests belong to a leaf: a group, or the
  tenant itself. The next request comes from the tenant first in DRF order, then from the group first within it.
  A tenant's allocation is the sum of its leaves' (its own requests and its groups'); each level's dominant share is
  max over resources of allocation / pod total, divided by that level's weight.
* **Quota is a guarantee.** A tenant's consumed quota = what it holds outside its reservations + all it reserved
  (reservations count toward quota, used or not). Its guarantee left = quota − consumed (≥ 0, per resource). The pod
  must keep unreserved free resources ≥ Σ guarantees left (the **headroom**): a request that would leave less is held
  with code `headroom`, naming the tenants whose guarantee it protects. A tenant drawing on its own guarantee lowers
  what is needed as much as what is free, so it is never held by its own headroom.
* **Reservations.** Resources a tenant reserved are for it only: its requests use its unused reservation first; the
  other tenants see free minus every other tenant's unused reservation.
* **Limits** cap what a tenant holds (its whole tree).
* **Requested, not bound.** What a tenant holds and asks for (`demand`, `usage`) is what its containers *request*,
  CPU counted whether bound or not; what a request takes from the pod's free resources (`reserves`) is only what
  nodes reserve (bound cores, memory), since unbound CPU may be oversold on a node.

Everything is exact (`Fraction`) and deterministic: ties go to fewer allocations, then earlier arrival.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from eru.errors import InvalidInput
from eru.fairness.drf import ZERO, Resources, Tenant, TenantUsage, add, dominant_share, limit_excess, subtract

SEPARATOR = "/"


def parent_of(path: str) -> str:
    """The tenant a leaf belongs to: `team-a/web` → `team-a`, `team-a` → `team-a`."""
    return path.split(SEPARATOR, 1)[0]


def is_group(path: str) -> bool:
    """Whether `path` names a group (`tenant/group`) rather than a tenant."""
    return SEPARATOR in path


def check_groups(tenants: Mapping[str, Tenant], field_name: str = "tenants") -> None:
    """Groups are two levels deep at most, carry a weight only, and belong to a known tenant."""
    for name, tenant in tenants.items():
        if not is_group(name):
            continue
        parts = name.split(SEPARATOR)
        if len(parts) != 2 or not all(parts):
            raise InvalidInput(f"{field_name}.{name}", "a group is named TENANT/GROUP (two levels at most)")
        if parts[0] not in tenants:
            raise InvalidInput(f"{field_name}.{name}", f"group of unknown tenant {parts[0]!r}")
        if tenant.quota or tenant.limit:
            raise InvalidInput(
                f"{field_name}.{name}", "a group carries a weight only: set quota and limit on its tenant"
            )


def _positive(amounts: Resources) -> dict[str, Fraction]:
    return {name: amount for name, amount in amounts.items() if amount > 0}


def _at_least_zero(amounts: Resources) -> dict[str, Fraction]:
    return {name: max(amount, ZERO) for name, amount in amounts.items()}


@dataclass(frozen=True, slots=True)
class Blocked:
    """Why a leaf's next request cannot go now: `limit`, `capacity` or `headroom`, with the numbers."""

    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)


class Ledger:
    """Mutable working state of one decision (built from immutable inputs; the caller's mappings are not changed)."""

    def __init__(
        self,
        tenants: Mapping[str, Tenant],
        totals: Resources,
        free: Resources,
        usage: Mapping[str, TenantUsage],
        *,
        reserved: Mapping[str, Resources] | None = None,
        reserved_used: Mapping[str, Resources] | None = None,
    ) -> None:
        self.tenants = tenants
        self.totals = dict(totals)
        self.free: dict[str, Fraction] = {name: free.get(name, ZERO) for name in set(free) | set(totals)}
        self.usage: dict[str, TenantUsage] = dict(usage)
        self.reserved: dict[str, dict[str, Fraction]] = {k: dict(v) for k, v in (reserved or {}).items()}
        self.reserved_used: dict[str, dict[str, Fraction]] = {
            k: {r: min(a, self.reserved.get(k, {}).get(r, ZERO)) for r, a in v.items()}
            for k, v in (reserved_used or {}).items()
        }
        # a tenant's tree total, kept up to date by `charge` (filling asks for it at every step)
        self._rolled: dict[str, TenantUsage] = {}
        for leaf, held in self.usage.items():
            top = parent_of(leaf)
            self._rolled[top] = self._rolled.get(top, TenantUsage()).plus(held.allocated, held.allocations)
        self._guarded = any(t.quota for t in tenants.values())

    # ---------------------------------------------------------------------------------------------- accounting
    def tenant(self, name: str) -> Tenant:
        """The settings of `name` (a leaf's tenant defaults to weight 1, no quota or limit, when not given)."""
        return self.tenants.get(name) or Tenant(name)

    def rolled(self, tenant: str) -> TenantUsage:
        """A tenant's whole allocation: its own leaf plus its groups'."""
        return self._rolled.get(tenant) or TenantUsage()

    def unused_reserved(self, tenant: str) -> dict[str, Fraction]:
        """What `tenant` reserved and does not use."""
        return _at_least_zero(subtract(self.reserved.get(tenant, {}), self.reserved_used.get(tenant, {})))

    def consumed(self, tenant: str) -> dict[str, Fraction]:
        """Consumed quota: allocation outside its reservations + everything reserved."""
        rolled = self.rolled(tenant).allocated
        return add(subtract(rolled, self.reserved_used.get(tenant, {})), self.reserved.get(tenant, {}))

    def guarantee_left(self, tenant: str) -> dict[str, Fraction]:
        """quota − consumed, per resource with a quota (≥ 0)."""
        quota = self.tenant(tenant).quota
        if not quota:
            return {}
        consumed = self.consumed(tenant)
        return {name: max(amount - consumed.get(name, ZERO), ZERO) for name, amount in _positive(quota).items()}

    def top_tenants(self) -> list[str]:
        """Every top-level tenant known to this decision (settings, usage or reservations)."""
        names = {parent_of(name) for name in self.tenants} | {parent_of(n) for n in self.usage} | set(self.reserved)
        return sorted(names)

    def required_headroom(self, exclude: str | None = None) -> dict[str, Fraction]:
        """Σ guarantees left over the tenants (but `exclude`)."""
        required: dict[str, Fraction] = {}
        for name in self.top_tenants():
            if name != exclude:
                required = add(required, self.guarantee_left(name))
        return required

    def unreserved_free(self, exclude: str | None = None) -> dict[str, Fraction]:
        """Free minus the unused reservations of every tenant (but `exclude`, for whom its own are free)."""
        result = dict(self.free)
        for name in self.reserved:
            if name != exclude:
                result = subtract(result, self.unused_reserved(name))
        return result

    def headroom(self) -> dict[str, dict[str, Fraction]]:
        """Per resource with a guarantee somewhere: headroom required and unreserved free resources available."""
        required = self.required_headroom()
        available = self.unreserved_free()
        return {name: {"required": amount, "available": available.get(name, ZERO)} for name, amount in required.items()}

    # ---------------------------------------------------------------------------------------------------- order
    def tenant_key(self, tenant: str, arrival: int) -> tuple[int, Fraction, int, int]:
        """Level 1: (0 below its quota else 1, weighted dominant share of its tree, allocations, arrival)."""
        rolled = self.rolled(tenant)
        below = any(amount > 0 for amount in self.guarantee_left(tenant).values())
        share = dominant_share(rolled.allocated, self.totals, self.tenant(tenant).weight)
        return (0 if below else 1, share, rolled.allocations, arrival)

    def leaf_key(self, leaf: str, arrival: int) -> tuple[Fraction, int, int]:
        """Level 2, among one tenant's leaves: (weighted dominant share, allocations, arrival); the tenant's own
        requests form a leaf of weight 1 beside its groups."""
        held = self.usage.get(leaf, TenantUsage())
        weight = self.tenant(leaf).weight if is_group(leaf) else Fraction(1)
        return (dominant_share(held.allocated, self.totals, weight), held.allocations, arrival)

    def pick(self, arrivals: Mapping[str, int]) -> str:
        """The leaf served next among `arrivals` (leaf → arrival of its oldest open request): the first tenant in
        DRF order, then its first leaf."""
        firsts: dict[str, int] = {}
        for leaf, arrival in arrivals.items():
            top = parent_of(leaf)
            firsts[top] = min(arrival, firsts.get(top, arrival))
        top = min(firsts, key=lambda name: (self.tenant_key(name, firsts[name]), name))
        leaves = [leaf for leaf in arrivals if parent_of(leaf) == top]
        if len(leaves) == 1:
            return leaves[0]
        return min(leaves, key=lambda leaf: (self.leaf_key(leaf, arrivals[leaf]), leaf))

    # ------------------------------------------------------------------------------------------------- checks
    def blocked(self, leaf: str, demand: Resources, reserves: Resources | None = None) -> Blocked | None:
        """Why `demand` for `leaf` cannot go now (limit, capacity, headroom), or None. The limit is checked against
        `demand` (what the tenant requests); capacity and headroom against `reserves`, the part of it taken from the
        pod's free resources (bound cores and memory: unbound CPU may be oversold; default: all of `demand`)."""
        top = parent_of(leaf)
        tenant = self.tenant(top)
        excess = limit_excess(self.rolled(top).allocated, demand, tenant.limit)
        if excess:
            return Blocked("limit", f"tenant {top!r} is at its limit", excess)
        takes = demand if reserves is None else reserves
        unreserved_need = _at_least_zero(subtract(takes, self.unused_reserved(top)))
        visible = self.unreserved_free(exclude=top)  # its own unused reservation is free for it
        short = {
            name: {"need": amount, "available": max(visible.get(name, ZERO), ZERO)}
            for name, amount in takes.items()
            if amount > visible.get(name, ZERO)
        }
        if short:
            return Blocked("capacity", "not enough free resources", short)
        return self._headroom_verdict(top, unreserved_need)

    def _headroom_verdict(self, top: str, unreserved_need: Resources) -> Blocked | None:
        if not self._guarded:
            return None
        others = self.required_headroom(exclude=top)
        if not any(amount > 0 for amount in others.values()):
            return None
        own_left = self.guarantee_left(top)
        available = self.unreserved_free()
        over: dict[str, dict[str, Any]] = {}
        for name, required in others.items():
            # a tenant may always draw on its own guarantee; what goes beyond it must leave the others' headroom
            need = unreserved_need.get(name, ZERO)
            within = min(need, own_left.get(name, ZERO))
            beyond = need - within
            spare = available.get(name, ZERO) - within - required
            if required > 0 and beyond > 0 and beyond > spare:
                over[name] = {
                    "need": beyond,
                    "available": max(spare, ZERO),
                    "headroom": required,
                    "unreserved_free": available.get(name, ZERO),
                }
        if not over:
            return None
        guarded = {name: _positive(self.guarantee_left(name)) for name in self.top_tenants() if name != top}
        guarded = {name: left for name, left in guarded.items() if any(r in over for r in left)}
        names = ", ".join(sorted(guarded))
        return Blocked(
            "headroom",
            f"would use the headroom held for the quota guarantee of {names}",
            {"resources": over, "guarantees": guarded},
        )

    # ------------------------------------------------------------------------------------------------- charge
    def charge(self, leaf: str, demand: Resources, allocations: int, reserves: Resources | None = None) -> None:
        """Account `demand` (`allocations` instances) to `leaf` and take `reserves` (default: `demand`) from the
        pod's free resources, its tenant's unused reservation first."""
        top = parent_of(leaf)
        takes = demand if reserves is None else reserves
        from_reservation = {
            name: min(amount, self.unused_reserved(top).get(name, ZERO)) for name, amount in takes.items()
        }
        self.reserved_used[top] = add(self.reserved_used.get(top, {}), _positive(from_reservation))
        self.usage[leaf] = self.usage.get(leaf, TenantUsage()).plus(demand, allocations)
        self._rolled[top] = self.rolled(top).plus(demand, allocations)
        self.free = subtract(self.free, takes)


def leaves_by_tenant(names: Iterable[str]) -> dict[str, list[str]]:
    """Leaf paths grouped under their tenant (sorted)."""
    grouped: dict[str, list[str]] = {}
    for name in sorted(names):
        grouped.setdefault(parent_of(name), []).append(name)
    return grouped
