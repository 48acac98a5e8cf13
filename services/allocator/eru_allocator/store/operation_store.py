"""The operations capability (`eru.store.operations.OperationStore`) on PostgreSQL: one transaction per operation,
pods locked with their advisory locks, container rows `FOR NO KEY UPDATE` in the order asked, node usage changed
relatively under the row lock, the outbox written in the same transaction (statements in `store.container_ops`,
`store.accounting`, `store.batch_allowance`, `store.sql`, `store.outbox`, `store.reservations` and `store.waiting`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from eru.domain import Workload
from eru.fairness.drf import Tenant, TenantUsage
from eru.planning import NodeResources, PlanningConfig
from eru.planning.reservations import Amount
from eru.store import lock_pod, transaction
from eru.store.nodes import NodeCapacity
from eru.store.operations import (
    ListedReservation,
    LiveInstance,
    OperationNode,
    OperationSession,
    OperationStore,
    Reserved,
)
from eru.store.protocol import DecisionRow, OutboxMessage, Usage
from eru.store.queries import ContainerRecord
from eru.store.transaction import Connection
from eru_allocator.store import accounting, batch_allowance, container_ops, containers, reservations, sql, waiting
from eru_allocator.store.outbox import queue_many


class PgOperationSession:
    """`OperationSession` on one connection inside its transaction."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    async def pods_of(self, ids: Sequence[str]) -> dict[str, str]:
        """One statement: container id → pod."""
        return await container_ops.pods_of(self.conn, ids)

    async def lock_pods(self, pods: Sequence[str]) -> None:
        """The pods' advisory locks, in the order given."""
        for pod in pods:
            await lock_pod(self.conn, pod)

    async def lock_containers(self, ids: Sequence[str]) -> list[ContainerRecord | None]:
        """Each row `FOR NO KEY UPDATE`, in the order of `ids`."""
        return await container_ops.lock_containers(self.conn, ids)

    async def live_of_workload(self, workload: str, pod: str | None) -> list[LiveInstance]:
        """One statement, by id."""
        owners = await containers.live_of_workload(self.conn, workload, pod)
        return [LiveInstance(owner.id, owner.tenant) for owner in owners]

    async def node(self, name: str) -> OperationNode | None:
        """The node's row with its status (conditions)."""
        return await container_ops.realloc_node(self.conn, name)

    async def with_batch_allowance(self, node: OperationNode, config: PlanningConfig) -> NodeResources:
        """The allowance of the node's condition less the pod's batch instances placed since."""
        (resources,) = await batch_allowance.with_batch_allowances(
            self.conn, node.pod, [node.resources], {node.resources.name: dict(node.conditions)}, config
        )
        return resources

    async def held(self, pod: str, config: PlanningConfig) -> dict[str, TenantUsage]:
        """What live containers of `pod` hold, per tenant."""
        return await accounting.held(self.conn, pod, config)

    async def tenants(self) -> dict[str, Tenant]:
        """Every `tenants` row."""
        return await accounting.load_tenants(self.conn)

    async def record_decision(self, row: DecisionRow) -> None:
        """A `decisions` row."""
        await container_ops.record_decision(self.conn, row.id, row.kind, row.input, row.output)

    async def change_usage(self, node: str, usage: Usage, sign: int) -> None:
        """Relatively, under the node row's lock."""
        await sql.change_usage(self.conn, node, usage, sign)

    async def mark_updating(self, container_id: str, allocation: str, resources: str, previous: str) -> None:
        """State `updating`, the new allocation and requirement, the old ones in `previous_allocation`."""
        await container_ops.mark_updating(self.conn, container_id, allocation, resources, previous)

    async def mark_stopping(self, ids: Sequence[str]) -> None:
        """State `stopping` for the ones not gone."""
        await container_ops.mark_stopping(self.conn, ids)

    async def pending_replacement(self, container_id: str) -> str | None:
        """The replacement `planned` or `creating`."""
        return await container_ops.pending_replacement(self.conn, container_id)

    async def pod_policy(self, pod: str) -> dict[str, Any]:
        """The `pods` row's policy."""
        return await container_ops.pod_policy(self.conn, pod)

    async def deploy_request(self, deploy_id: str) -> dict[str, Any] | None:
        """The `deploys` row's request."""
        return await container_ops.deploy_request(self.conn, deploy_id)

    async def insert_replacement(self, container_id: str, old: ContainerRecord, workload: Workload) -> None:
        """The replacement's `containers` row."""
        await container_ops.insert_replacement(self.conn, container_id, old, workload)

    async def queue(self, messages: Sequence[OutboxMessage]) -> None:
        """One statement for all of them (`store.outbox.queue_many`)."""
        await queue_many(self.conn, [(m.subject, m.message, m.envelope) for m in messages])

    async def tenant_exists(self, name: str) -> bool:
        """The `tenants` row."""
        return await reservations.tenant_exists(self.conn, name)

    async def lock_node(self, name: str) -> NodeCapacity | None:
        """The `nodes` row `FOR UPDATE`."""
        return await reservations.lock_node(self.conn, name)

    async def reserved_by_others(self, node: str, tenant: str) -> Reserved:
        """One sum over `tenant_reservations`."""
        return await reservations.reserved_by_others(self.conn, node, tenant)

    async def put_reservation(self, tenant: str, node: str, cpu: str, memory: int) -> None:
        """An upsert of the `tenant_reservations` row."""
        await reservations.put_reservation(self.conn, tenant, node, cpu, memory)

    async def drop_reservation(self, tenant: str, node: str) -> str | None:
        """The row deleted, its node's pod returned."""
        return await reservations.drop_reservation(self.conn, tenant, node)

    async def wake_admission(self, pod: str) -> None:
        """pg_notify on the admission channel, sent at commit."""
        await waiting.wake_admission(self.conn, pod)

    async def reservation_page(
        self, tenant: str | None, pod: str | None, limit: int, after: tuple[str, str] | None
    ) -> list[ListedReservation]:
        """One statement, in (tenant, node) order."""
        return await reservations.reservation_page(self.conn, tenant, pod, limit, after)

    async def reservation_use(self, pod: str, config: PlanningConfig) -> dict[tuple[str, str], Amount]:
        """The pod's reservations and what each tenant holds per node (`reservations.load`)."""
        fairness = await reservations.load(self.conn, pod, config)
        used: dict[tuple[str, str], Amount] = {}
        for (tenant, node), held in fairness.held.items():
            reserved = fairness.reservations.get(node, {}).get(tenant)
            if reserved is not None:
                used[(tenant, node)] = reserved.used_by(held)
        return used


class PgOperations:
    """`OperationStore` over `pool` (see the module doc)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    @asynccontextmanager
    async def operation(self) -> AsyncIterator[PgOperationSession]:
        """One transaction on a connection of the pool."""
        async with transaction(self.pool) as conn:
            yield PgOperationSession(conn)


def _conforms(store: PgOperations, session: PgOperationSession) -> tuple[OperationStore, OperationSession]:
    """Where mypy checks that `PgOperations` is an `OperationStore`."""
    return store, session
