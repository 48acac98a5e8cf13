"""The operations capability (`eru.store.operations.OperationStore`) in memory, mixed into `InMemoryStore`
(eru.testing.memory_store): the same answers as PostgreSQL's `PgOperations` (the contract suite,
tests/integration/store/test_operations_contract.py, runs both). A unit of work writes at once (what it reads
afterwards counts its writes, as a transaction does) and keeps an undo record: a block that raises takes back what
it wrote, and only that. Pod locks are the pod sessions' asyncio locks; container rows are locked with an asyncio lock
each, held until the block ends. A batch allowance counts the batch instances not yet running (as the deploy path's
snapshot in memory does: the fake keeps no creation times to compare with a condition's).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from typing import Any

from eru.domain import Workload
from eru.fairness.drf import Tenant, TenantUsage
from eru.planning import NodeResources, PlanningConfig
from eru.planning.batch import allowance_from_condition, less_placed
from eru.store.operations import LiveInstance, OperationNode, OperationSession, OperationStore
from eru.store.protocol import ContainerRow, DecisionRow, DeployRow, OutboxMessage, Usage
from eru.store.queries import ContainerRecord
from eru.testing.memory_containers import charged
from eru.testing.memory_queries import MemoryQueries
from eru.testing.memory_tenants import GONE, stored_need

PENDING = frozenset({"planned", "creating"})


class MemoryOperationSession:
    """One unit of work on a `MemoryOperations` store (see the module doc)."""

    def __init__(self, store: MemoryOperations, locks: AsyncExitStack) -> None:
        self.store = store
        self.locks = locks
        self.undo: list[Callable[[], None]] = []
        self.held_rows: set[str] = set()

    async def pods_of(self, ids: Sequence[str]) -> dict[str, str]:
        """Container id → pod for the known ones."""
        return {i: self.store.containers[i].pod for i in ids if i in self.store.containers}

    async def lock_pods(self, pods: Sequence[str]) -> None:
        """The pod sessions' locks, in the order given."""
        for pod in pods:
            await self.locks.enter_async_context(self.store.pod_lock(pod))

    async def lock_containers(self, ids: Sequence[str]) -> list[ContainerRecord | None]:
        """Each row's lock in turn, then its record."""
        records: list[ContainerRecord | None] = []
        for container_id in ids:
            if container_id not in self.store.containers:
                records.append(None)
                continue
            if container_id not in self.held_rows:
                self.held_rows.add(container_id)
                await self.locks.enter_async_context(self.store.row_lock(container_id))
            row = self.store.containers.get(container_id)
            records.append(None if row is None else self.store.container_record(row))
        return records

    async def live_of_workload(self, workload: str, pod: str | None) -> list[LiveInstance]:
        """The live containers of `workload`, by id."""
        rows = self.store.containers.values()
        found = [r for r in rows if r.workload == workload and (pod is None or r.pod == pod) and r.state not in GONE]
        return [LiveInstance(row.id, row.tenant) for row in sorted(found, key=lambda row: row.id)]

    async def node(self, name: str) -> OperationNode | None:
        """The node as stored now."""
        node = self.store.nodes.get(name)
        return None if node is None else OperationNode(node.resources, node.pod, dict(node.conditions))

    async def with_batch_allowance(self, node: OperationNode, config: PlanningConfig) -> NodeResources:
        """The condition's allowance less the pod's batch instances on the node not yet running."""
        allowance = allowance_from_condition(dict(node.conditions), config.share_base)
        if allowance == (None, None):
            return node.resources
        cpu = memory = 0
        for row in self.store.containers.values():
            need = stored_need(row.resources, config)
            mine = row.pod == node.pod and row.node == node.resources.name and row.priority_class == "batch"
            if mine and row.state in PENDING and need is not None:
                cpu, memory = cpu + need.cpu_request, memory + need.memory_request
        cpu_left, memory_left = less_placed(allowance, cpu, memory)
        if cpu_left is None and memory_left is None:
            return node.resources
        return replace(node.resources, batch_cpu=cpu_left, batch_memory=memory_left)

    async def held(self, pod: str, config: PlanningConfig) -> dict[str, TenantUsage]:
        """`held_by_tenant(pod)` of the tenants capability (this unit's writes are in already)."""
        return await self.store.held_by_tenant(pod, config)

    async def tenants(self) -> dict[str, Tenant]:
        """The tenants capability's configs."""
        return await self.store.tenant_configs()

    async def record_decision(self, row: DecisionRow) -> None:
        """Kept in `decisions`."""
        decisions = self.store.decisions
        decisions[row.id] = row
        self.undo.append(lambda: decisions.pop(row.id, None) and None)

    async def change_usage(self, node: str, usage: Usage, sign: int) -> None:
        """The node's usage moved by `sign` × `usage`."""
        signed = Usage(
            {core: sign * pieces for core, pieces in usage.cpu_map.items()},
            sign * usage.memory,
            {numa: sign * amount for numa, amount in usage.numa_memory.items()},
        )
        found = self.store.nodes[node]
        before = found.resources
        found.resources = charged(before, signed)
        self.undo.append(lambda: setattr(found, "resources", before))

    def _replace_row(self, container_id: str, **fields: Any) -> None:
        before = self.store.containers[container_id]
        self.store.containers[container_id] = before._replace(**fields)
        self.undo.append(lambda: self.store.containers.__setitem__(container_id, before))

    async def mark_updating(self, container_id: str, allocation: str, resources: str, previous: str) -> None:
        """State `updating`; the previous allocation kept where the events capability reads it."""
        self._replace_row(container_id, state="updating", allocation=allocation, resources=resources)
        kept = self.store.event_state.previous_allocations
        had = container_id in kept
        old = kept.get(container_id)
        kept[container_id] = previous

        def restore() -> None:
            if had:
                kept[container_id] = old
            else:
                kept.pop(container_id, None)

        self.undo.append(restore)

    async def mark_stopping(self, ids: Sequence[str]) -> None:
        """State `stopping` for the ones not gone."""
        for container_id in ids:
            row = self.store.containers.get(container_id)
            if row is not None and row.state not in GONE:
                self._replace_row(container_id, state="stopping")

    async def pending_replacement(self, container_id: str) -> str | None:
        """A row replacing `container_id` that is not running yet."""
        for row in self.store.containers.values():
            if row.replaces == container_id and row.state in PENDING:
                return row.id
        return None

    async def pod_policy(self, pod: str) -> dict[str, Any]:
        """The pod's policy ({} when none)."""
        return dict(self.store.pods.get(pod) or {})

    async def deploy_request(self, deploy_id: str) -> dict[str, Any] | None:
        """The stored deploy's request."""
        deploy = self.store.deploys.get(deploy_id)
        if deploy is None:
            return None
        request: dict[str, Any] = json.loads(deploy.request)
        return request

    async def insert_replacement(self, container_id: str, old: ContainerRecord, workload: Workload) -> None:
        """A `planned` row on `old`'s node with its allocation and requirement."""
        self.store.containers[container_id] = ContainerRow(
            container_id,
            old.deploy_id or "",
            old.node,
            old.pod,
            workload.name,
            workload.image,
            workload.tenant,
            workload.priority_class,
            workload.priority,
            old.allocation,
            old.resources,
            "planned",
            json.dumps(workload.labels),
            old.id,
        )
        self.undo.append(lambda: self.store.containers.pop(container_id, None) and None)

    async def queue(self, messages: Sequence[OutboxMessage]) -> None:
        """Appended to the store's outbox."""
        outbox, count = self.store.outbox, len(messages)
        outbox += messages
        self.undo.append(lambda: outbox.__delitem__(slice(len(outbox) - count, len(outbox))))


class MemoryOperations(MemoryQueries):
    """`OperationStore` over the store's `containers`, `nodes`, `pods`, `deploys`, `decisions` and `outbox`."""

    deploys: dict[str, DeployRow]
    decisions: dict[str, DecisionRow]
    tenants: dict[str, Tenant]
    _locks: dict[str, asyncio.Lock]

    async def held_by_tenant(self, pod: str | None, config: PlanningConfig) -> dict[str, TenantUsage]:
        """Defined by the tenants capability."""
        raise NotImplementedError

    async def tenant_configs(self) -> dict[str, Tenant]:
        """Defined by the tenants capability."""
        raise NotImplementedError

    def container_record(self, row: ContainerRow) -> ContainerRecord:
        """`row` as the typed record the queries capability answers."""
        return self._query_record(row)

    def pod_lock(self, pod: str) -> asyncio.Lock:
        """The lock of `pod` (the one its pod sessions take)."""
        return self._locks.setdefault(pod, asyncio.Lock())

    def row_lock(self, container_id: str) -> asyncio.Lock:
        """The lock of container `container_id`'s row."""
        locks: dict[str, asyncio.Lock] = self.__dict__.setdefault("_row_locks", {})
        return locks.setdefault(container_id, asyncio.Lock())

    @asynccontextmanager
    async def operation(self) -> AsyncIterator[MemoryOperationSession]:
        """A unit of work: its writes undone, newest first, when the block raises; its locks let go at its end."""
        async with AsyncExitStack() as locks:
            session = MemoryOperationSession(self, locks)
            try:
                yield session
            except BaseException:
                for undo in reversed(session.undo):
                    undo()
                raise


def _conforms(store: MemoryOperations, session: MemoryOperationSession) -> tuple[OperationStore, OperationSession]:
    """Where mypy checks that `MemoryOperations` is an `OperationStore`."""
    return store, session
