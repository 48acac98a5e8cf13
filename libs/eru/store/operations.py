"""The operations capability of the allocator's store (docs/store.md "Capabilities"): what the operations on running
containers (realloc, remove, replace; docs/planning.md) and the lifecycle verbs (stop, start, restart, dissociate,
remove-workload; docs/cli.md) and the reservation verbs (tenant-reserve, tenant-unreserve, tenant-reservations;
docs/fairness-and-scoring.md) read and write. Each operation is one unit of work,
`OperationStore.operation()`: one transaction in which it locks what it changes (the pods of a realloc, then the
containers, each row in the order asked), reads typed rows (`ContainerRecord`, `OperationNode`, tenants and what they
hold), and writes charges, state changes, decisions and its node commands (the outbox) together. A block that ends
normally commits everything; one that raises (a group that does not fit, a tenant over its limit, bad input) leaves
nothing behind. Implemented by PostgreSQL (`eru_allocator.store.operation_store.PgOperations`) and in memory
(`eru.testing.memory_operations`); the contract suite (tests/integration/store/test_operations_contract.py) runs the
same cases against both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol

from eru.domain import Workload
from eru.fairness.drf import Tenant, TenantUsage
from eru.planning import NodeResources, PlanningConfig
from eru.planning.reservations import Amount
from eru.store.nodes import NodeCapacity
from eru.store.protocol import DecisionRow, OutboxMessage, Usage
from eru.store.queries import ContainerRecord


@dataclass(frozen=True)
class OperationNode:
    """A node as an operation reads it: its resources with usage (as a snapshot reads them), its pod and its newest
    condition ({} when none)."""

    resources: NodeResources
    pod: str
    conditions: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LiveInstance:
    """A live container of a workload and the tenant (or group) it belongs to."""

    id: str
    tenant: str


@dataclass(frozen=True)
class Reserved:
    """Reserved amounts: cores (exact) and memory bytes."""

    cpu: Fraction
    memory: int


@dataclass(frozen=True)
class ListedReservation:
    """A reservation as `tenant-reservations` lists it: cores and memory bytes reserved on a node of a pod."""

    tenant: str
    node: str
    pod: str
    cpu: float
    memory: int


class OperationSession(Protocol):
    """One operation's transaction (see the module doc)."""

    async def pods_of(self, ids: Sequence[str]) -> dict[str, str]:
        """Container id → its pod, for the known ones of `ids` (read without locks: lock the pods, then the rows)."""

    async def lock_pods(self, pods: Sequence[str]) -> None:
        """Take the locks of `pods` (in the order given: callers sort them) until the transaction ends."""

    async def lock_containers(self, ids: Sequence[str]) -> list[ContainerRecord | None]:
        """The rows of containers `ids`, each locked in turn (None for an unknown id), in the order of `ids`."""

    async def live_of_workload(self, workload: str, pod: str | None) -> list[LiveInstance]:
        """The live containers of `workload` (in `pod`; any pod when None), by id (read without locks)."""

    async def node(self, name: str) -> OperationNode | None:
        """Node `name` with its usage now; None when unknown."""

    async def with_batch_allowance(self, node: OperationNode, config: PlanningConfig) -> NodeResources:
        """`node`'s resources with the batch allowance of its condition less the batch instances its pod's record
        does not count yet (docs/colocation.md; no condition: unchanged)."""

    async def held(self, pod: str, config: PlanningConfig) -> dict[str, TenantUsage]:
        """What each tenant holds in `pod` now (live containers; a pending replacement holds nothing of its own),
        this transaction's writes counted."""

    async def tenants(self) -> dict[str, Tenant]:
        """Every tenant and group by name."""

    async def record_decision(self, row: DecisionRow) -> None:
        """Write a `decisions` row (input as an `eru plan` problem, output: JSON text)."""

    async def change_usage(self, node: str, usage: Usage, sign: int) -> None:
        """Add (`sign` 1) or give back (`sign` -1) `usage` on node `node`."""

    async def mark_updating(self, container_id: str, allocation: str, resources: str, previous: str) -> None:
        """Container `container_id` moves to `updating` with its new allocation and requirement (JSON text), the
        old ones kept as its previous allocation (JSON text) until its node agent confirms."""

    async def mark_stopping(self, ids: Sequence[str]) -> None:
        """Containers `ids` that still hold resources move to `stopping` (the gone ones are left as they are)."""

    async def pending_replacement(self, container_id: str) -> str | None:
        """The id of `container_id`'s replacement not yet running (`planned`, `creating`), if any."""

    async def pod_policy(self, pod: str) -> dict[str, Any]:
        """The pod's policy object ({} when none)."""

    async def deploy_request(self, deploy_id: str) -> dict[str, Any] | None:
        """The deploy request (a JSON object) of deploy `deploy_id`; None when it is gone."""

    async def insert_replacement(self, container_id: str, old: ContainerRecord, workload: Workload) -> None:
        """The row of `container_id` (`planned`), to replace `old` on its node with its allocation and requirement,
        running `workload`."""

    async def queue(self, messages: Sequence[OutboxMessage]) -> None:
        """Queue `messages` in the outbox, published in this order once the transaction commits."""

    # ------------------------------------------------------------ reservations (docs/fairness-and-scoring.md)
    async def tenant_exists(self, name: str) -> bool:
        """Whether tenant `name` was created."""

    async def lock_node(self, name: str) -> NodeCapacity | None:
        """Node `name`'s capacity (pod, cores, memory, share base), its row locked until the transaction ends (two
        reservations on it check one after the other); None when unknown."""

    async def reserved_by_others(self, node: str, tenant: str) -> Reserved:
        """What tenants other than `tenant` reserved on `node`."""

    async def put_reservation(self, tenant: str, node: str, cpu: str, memory: int) -> None:
        """Set `tenant`'s reservation on `node` (cores as decimal text, memory bytes), replacing an earlier one."""

    async def drop_reservation(self, tenant: str, node: str) -> str | None:
        """Drop `tenant`'s reservation on `node`; the node's pod, None when there was none."""

    async def wake_admission(self, pod: str) -> None:
        """Wake the admission passes of `pod` when the transaction commits (its reservations changed)."""

    async def reservation_page(
        self, tenant: str | None, pod: str | None, limit: int, after: tuple[str, str] | None
    ) -> list[ListedReservation]:
        """Up to `limit` reservations (of `tenant`, in `pod`) after `after` (tenant, node), in that order."""

    async def reservation_use(self, pod: str, config: PlanningConfig) -> dict[tuple[str, str], Amount]:
        """(tenant, node) → what of its reservation there the tenant's live containers (its groups' too) use."""


class OperationStore(Protocol):
    """The operations on running containers' units of work (see the module doc)."""

    def operation(self) -> AbstractAsyncContextManager[OperationSession]:
        """Open one transaction for the block: committed when it ends normally, nothing written when it raises."""


__all__ = [
    "ListedReservation",
    "LiveInstance",
    "OperationNode",
    "OperationSession",
    "OperationStore",
    "Reserved",
]
