"""The tenants capability of the allocator's store (docs/store.md "Capabilities"): the tenants and groups operators
configure, what each holds, what waits for each, and what keeps one from being removed. Implemented by PostgreSQL
(`eru_allocator.store.tenants.PgTenants`, and `PgStore` with it) and in memory (`eru.testing.memory_store`); the
contract suite (tests/integration/store/test_store_contract.py) runs the same cases against both.

The verbs that change a tenant are atomic: `update_tenant` runs its `change` with the tenant's row locked and writes
what it returns, `remove_tenant` runs its `check` on what the tenant holds with the row locked and removes it unless
`check` raises (then nothing changes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple, Protocol

from eru.fairness.drf import Tenant, TenantUsage
from eru.planning.request import PlanningConfig
from eru.planning.reservations import Amount
from eru.planning.resources import NodeResources

Created = Literal["created", "exists", "unknown parent"]
"""What `create_tenant` did: created it, or not because the name exists or a group's tenant is unknown."""


class TenantHoldings(NamedTuple):
    """What a tenant still has that keeps it from being removed: live containers, waiting requests, its groups (name
    order) and the nodes it reserves resources on (name order)."""

    live: int
    waiting: int
    groups: list[str]
    reserved_nodes: list[str]


class PodReservations(NamedTuple):
    """A pod's reservations (node → top-level tenant → amount) and, per (top-level tenant, node), what the tenant's
    live containers hold there (read only when the pod has reservations: empty otherwise)."""

    reservations: dict[str, dict[str, Amount]]
    held: dict[tuple[str, str], Amount]


class TenantStore(Protocol):
    """Tenants and their accounting (see the module doc)."""

    async def tenant_configs(self) -> dict[str, Tenant]:
        """Every tenant and group by name (the default tenant created first when missing)."""

    async def tenant_names(self, limit: int) -> list[str]:
        """Some tenant names in name order (for the error naming an unknown tenant)."""

    async def create_tenant(self, tenant: Tenant) -> Created:
        """Add `tenant` (a group `tenant/group` of an existing tenant); nothing changes unless "created"."""

    async def update_tenant(self, name: str, change: Callable[[Tenant], Tenant]) -> Tenant | None:
        """Replace tenant `name` by `change(old)` (weight, quota, limit; the name stays) and wake the admission of
        waiting requests; None when unknown. An exception of `change` leaves the tenant as it was."""

    async def remove_tenant(self, name: str, check: Callable[[TenantHoldings], None]) -> bool:
        """Remove tenant `name` after `check(what it holds)`; False when unknown. An exception of `check` leaves it."""

    async def held_by_tenant(self, pod: str | None, config: PlanningConfig) -> dict[str, TenantUsage]:
        """What each tenant and group holds in `pod` (all pods: None): live containers, a pending replacement
        holding nothing of its own yet."""

    async def waiting_by_tenant(self, pod: str | None) -> dict[str, int]:
        """Requests waiting for admission per tenant or group, in `pod` (all pods: None)."""

    async def schedulable_capacity(self, pod: str | None, down_after_seconds: float) -> list[NodeResources]:
        """The schedulable nodes (up, not cordoned, a heartbeat within `down_after_seconds` or none yet) of `pod`,
        of every pod when None: pods in name order, each pod's nodes by name."""

    async def pod_reservations(self, pod: str, config: PlanningConfig) -> PodReservations:
        """What tenants reserved on `pod`'s nodes and what their live containers hold there."""


__all__ = ["Created", "PodReservations", "TenantHoldings", "TenantStore"]
