"""The operations capability (`eru.store.operations.OperationStore`) on PostgreSQL: one transaction per operation,
pods locked with their advisory locks, container rows `FOR NO KEY UPDATE` in the order asked, node usage changed
relatively under the row lock, the outbox written in the same transaction (statements in `store.container_ops`,
`store.accounting`, `store.batch_allowance`, `store.sql` and `store.outbox`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from eru.domain import Workload
from eru.fairness.drf import Tenant, TenantUsage
from eru.planning import NodeResources, PlanningConfig
from eru.store import lock_pod, transaction
from eru.store.operations import LiveInstance, OperationNode, OperationSession, OperationStore
from eru.store.protocol import DecisionRow, OutboxMessage, Usage
from eru.store.queries import ContainerRecord
from eru.store.transaction import Connection
from eru_allocator.store import accounting, batch_allowance, container_ops, containers, sql
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
