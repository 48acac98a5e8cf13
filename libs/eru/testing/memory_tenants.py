"""The tenants capability (`eru.store.tenants.TenantStore`) in memory, mixed into `InMemoryStore`
(eru.testing.memory_store): the same answers as PostgreSQL's `PgTenants` (the contract suite,
tests/integration/store/test_store_contract.py, runs both). A verb that changes a tenant applies nothing when its
callback raises, as PostgreSQL's transaction rolls back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from eru.domain import ResourceRequest
from eru.errors import InvalidInput
from eru.fairness.drf import Tenant, TenantUsage
from eru.fairness.ledger import is_group, parent_of
from eru.planning.request import PlanningConfig, normalize_request
from eru.planning.reservations import Amount
from eru.planning.resources import NodeResources
from eru.planning.snapshot import instance_demand
from eru.store.protocol import ContainerRow, WaitRow
from eru.store.tenants import Created, PodReservations, TenantHoldings, TenantStore

if TYPE_CHECKING:
    from eru.testing.memory_containers import MemoryEventState
    from eru.testing.memory_store import MemoryNode

GONE = frozenset({"removed", "failed", "lost"})
"""Container states that hold nothing."""


def stored_need(resources: str, config: PlanningConfig) -> Any:
    """A stored requirement normalised, None for a record of an older model (not counted, as PostgreSQL's)."""
    try:
        return normalize_request(ResourceRequest.model_validate_json(resources), config, "resources")
    except (InvalidInput, ValueError):
        return None


class MemoryTenants:
    """`TenantStore` over the store's `tenants`, `containers`, `waits` and `reservations` (node → tenant → amount)."""

    now: float
    pods: dict[str, dict[str, Any]]
    nodes: dict[str, MemoryNode]
    event_state: MemoryEventState
    """The container events capability's (`eru.testing.memory_containers`): the nodes' last heartbeats."""
    tenants: dict[str, Tenant]
    containers: dict[str, ContainerRow]
    waits: list[WaitRow]
    reservations: dict[str, dict[str, Amount]]
    admission_wakes: int
    """How many times a tenant's change woke the admission loops (PostgreSQL: pg_notify to the waiting pods)."""

    async def tenant_configs(self) -> dict[str, Tenant]:
        """Every tenant and group by name (the store starts with the default tenant)."""
        return dict(self.tenants)

    async def tenant_names(self, limit: int) -> list[str]:
        """Some tenant names in name order."""
        return sorted(self.tenants)[:limit]

    async def create_tenant(self, tenant: Tenant) -> Created:
        """Add `tenant`; "exists" or "unknown parent" change nothing."""
        if is_group(tenant.name) and parent_of(tenant.name) not in self.tenants:
            return "unknown parent"
        if tenant.name in self.tenants:
            return "exists"
        self.tenants[tenant.name] = tenant
        return "created"

    async def update_tenant(self, name: str, change: Callable[[Tenant], Tenant]) -> Tenant | None:
        """Replace tenant `name` by `change(old)` and wake the admission loops; None when unknown."""
        old = self.tenants.get(name)
        if old is None:
            return None
        new = change(old)
        self.tenants[name] = Tenant(name, new.weight, new.quota, new.limit)
        self.admission_wakes += 1
        return self.tenants[name]

    async def remove_tenant(self, name: str, check: Callable[[TenantHoldings], None]) -> bool:
        """Remove tenant `name` after `check(what it holds)`; False when unknown."""
        if name not in self.tenants:
            return False
        check(
            TenantHoldings(
                live=sum(1 for row in self.containers.values() if row.tenant == name and row.state not in GONE),
                waiting=sum(1 for wait in self.waits if wait.tenant == name),
                groups=sorted(other for other in self.tenants if is_group(other) and parent_of(other) == name),
                reserved_nodes=sorted(node for node, per_tenant in self.reservations.items() if name in per_tenant),
            )
        )
        del self.tenants[name]
        return True

    async def held_by_tenant(self, pod: str | None, config: PlanningConfig) -> dict[str, TenantUsage]:
        """What each tenant and group holds in `pod` (all pods: None)."""
        usage: dict[str, TenantUsage] = {}
        for row in self.containers.values():
            if row.state in GONE or row.replaces is not None or (pod is not None and row.pod != pod):
                continue
            need = stored_need(row.resources, config)
            if need is None:
                continue
            demand = instance_demand(need, config.share_base)
            usage[row.tenant] = usage.get(row.tenant, TenantUsage()).plus(demand, 1)
        return usage

    async def waiting_by_tenant(self, pod: str | None) -> dict[str, int]:
        """Waiting requests per tenant or group in `pod` (all pods: None)."""
        counts: dict[str, int] = {}
        for wait in self.waits:
            if pod is None or wait.pod == pod:
                counts[wait.tenant] = counts.get(wait.tenant, 0) + 1
        return counts

    async def schedulable_capacity(self, pod: str | None, down_after_seconds: float) -> list[NodeResources]:
        """Nodes up and not cordoned whose newest heartbeat (if any) is under `down_after_seconds` old, of `pod`
        (every pod: None), pods in name order, each pod's nodes by name."""
        beats = self.event_state.heartbeats
        found = []
        for name in [pod] if pod is not None else sorted(self.pods):
            for node in sorted((n for n in self.nodes.values() if n.pod == name), key=lambda n: n.resources.name):
                beat = beats.get(node.resources.name)
                if node.state == "up" and not node.cordoned and (beat is None or beat > self.now - down_after_seconds):
                    found.append(node.resources)
        return found

    async def pod_reservations(self, pod: str, config: PlanningConfig) -> PodReservations:
        """The reservations on `pod`'s nodes; with any, what each top-level tenant's live containers (pending
        replacements apart) hold per node."""
        reserved = {
            node: dict(per_tenant)
            for node, per_tenant in sorted(self.reservations.items())
            if per_tenant and node in self.nodes and self.nodes[node].pod == pod
        }
        held: dict[tuple[str, str], Amount] = {}
        if reserved:
            for row in self.containers.values():
                if row.pod != pod or row.state in GONE or row.replaces is not None:
                    continue
                need = stored_need(row.resources, config)
                if need is not None:
                    key = (parent_of(row.tenant), row.node)
                    amount = Amount(need.cpu_request if need.cpu_bind else 0, need.memory_request)
                    held[key] = held.get(key, Amount()).plus(amount)
        return PodReservations(reserved, held)


def _conforms(store: MemoryTenants) -> TenantStore:
    """Where mypy checks that `MemoryTenants` is a `TenantStore`."""
    return store
