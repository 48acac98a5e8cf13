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
from fractions import Fraction
from typing import Any

from eru.domain import Workload
from eru.fairness.drf import Tenant, TenantUsage
from eru.fairness.ledger import parent_of
from eru.planning import NodeResources, PlanningConfig
from eru.planning.batch import allowance_from_condition, less_placed
from eru.planning.reservations import Amount
from eru.store.nodes import NodeCapacity
from eru.store.operations import (
    ListedReservation,
    LiveInstance,
    OperationNode,
    OperationSession,
    OperationStore,
    Reserved,
)
from eru.store.protocol import ContainerRow, DecisionRow, DeployRow, OutboxMessage, Usage
from eru.store.queries import ContainerRecord
from eru.testing.memory_containers import charged
from eru.testing.memory_queries import MemoryQueries
from eru.testing.memory_tenants import GONE, stored_need
from eru.units import cpu_to_pieces

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

    # ---------------------------------------------------------------------------------------------- reservations
    async def tenant_exists(self, name: str) -> bool:
        """Whether the tenants capability knows `name`."""
        return name in self.store.tenants

    async def lock_node(self, name: str) -> NodeCapacity | None:
        """The node's capacity, its lock held until the block ends."""
        node = self.store.nodes.get(name)
        if node is None:
            return None
        await self.locks.enter_async_context(self.store.row_lock(f"node {name}"))
        resources = self.store.nodes[name].resources
        share_base = self.store.node_state.share_base.get(name, 100)
        return NodeCapacity(name, node.pod, dict(resources.cpu_map), resources.memory, share_base=share_base)

    async def reserved_by_others(self, node: str, tenant: str) -> Reserved:
        """The other tenants' reservations on `node`, summed."""
        cpu, memory = Fraction(0), 0
        for owner, amount in self.store.reservations.get(node, {}).items():
            if owner != tenant:
                cpu += self.store.reserved_cores(owner, node)
                memory += amount.memory
        return Reserved(cpu, memory)

    async def put_reservation(self, tenant: str, node: str, cpu: str, memory: int) -> None:
        """Kept as pieces of the node's share base (and the cores as given)."""
        share_base = self.store.node_state.share_base.get(node, 100)
        self._set_reservation(tenant, node, (cpu, Amount(cpu_to_pieces(cpu, share_base, "cpu"), memory)))

    async def drop_reservation(self, tenant: str, node: str) -> str | None:
        """The reservation dropped; its node's pod."""
        if tenant not in self.store.reservations.get(node, {}) or node not in self.store.nodes:
            return None
        self._set_reservation(tenant, node, None)
        return self.store.nodes[node].pod

    def _set_reservation(self, tenant: str, node: str, new: tuple[str, Amount] | None) -> None:
        per_node, cores = self.store.reservations, self.store.reservation_cores
        before = (cores.get((tenant, node)), per_node.get(node, {}).get(tenant))

        def put(value: tuple[str | None, Amount | None]) -> None:
            text, amount = value
            if amount is None:
                per_node.get(node, {}).pop(tenant, None)
                if not per_node.get(node, True):
                    per_node.pop(node, None)
            else:
                per_node.setdefault(node, {})[tenant] = amount
            if text is None:
                cores.pop((tenant, node), None)
            else:
                cores[(tenant, node)] = text

        put((None, None) if new is None else new)
        self.undo.append(lambda: put(before))

    async def wake_admission(self, pod: str) -> None:
        """Recorded where the nodes capability records its wake-ups."""
        woken = self.store.node_state.woken
        woken.append(pod)
        self.undo.append(lambda: woken.__delitem__(-1))

    async def reservation_page(
        self, tenant: str | None, pod: str | None, limit: int, after: tuple[str, str] | None
    ) -> list[ListedReservation]:
        """The reservations on known nodes in (tenant, node) order."""
        found = []
        for node, per_tenant in self.store.reservations.items():
            known = self.store.nodes.get(node)
            for owner, amount in per_tenant.items():
                if known is None or (tenant is not None and owner != tenant) or (pod is not None and known.pod != pod):
                    continue
                if after is not None and (owner, node) <= after:
                    continue
                cores = float(self.store.reserved_cores(owner, node))
                found.append(ListedReservation(owner, node, known.pod, cores, amount.memory))
        return sorted(found, key=lambda row: (row.tenant, row.node))[:limit]

    async def reservation_use(self, pod: str, config: PlanningConfig) -> dict[tuple[str, str], Amount]:
        """What the pod's live containers (not pending replacements) hold of their tenant's reservations."""
        mine = {name for name, node in self.store.nodes.items() if node.pod == pod}
        reserved = {node: per for node, per in self.store.reservations.items() if node in mine and per}
        if not reserved:
            return {}
        held: dict[tuple[str, str], Amount] = {}
        for row in self.store.containers.values():
            need = stored_need(row.resources, config)
            if row.pod != pod or row.state in GONE or row.replaces is not None or need is None:
                continue
            key = (parent_of(row.tenant), row.node)
            amount = Amount(need.cpu_request if need.cpu_bind else 0, need.memory_request)
            held[key] = held.get(key, Amount()).plus(amount)
        used = {}
        for (owner, node), amount in held.items():
            reservation = reserved.get(node, {}).get(owner)
            if reservation is not None:
                used[(owner, node)] = reservation.used_by(amount)
        return used


class MemoryOperations(MemoryQueries):
    """`OperationStore` over the store's `containers`, `nodes`, `pods`, `deploys`, `decisions` and `outbox`."""

    deploys: dict[str, DeployRow]
    decisions: dict[str, DecisionRow]
    tenants: dict[str, Tenant]
    reservations: dict[str, dict[str, Amount]]
    _locks: dict[str, asyncio.Lock]

    @property
    def reservation_cores(self) -> dict[tuple[str, str], str]:
        """(tenant, node) → the cores of its reservation as the operator gave them (decimal text)."""
        cores: dict[tuple[str, str], str] = self.__dict__.setdefault("_reservation_cores", {})
        return cores

    def reserved_cores(self, tenant: str, node: str) -> Fraction:
        """The cores `tenant` reserved on `node` (from its pieces when set directly, `add_reservation`-style)."""
        text = self.reservation_cores.get((tenant, node))
        if text is not None:
            return Fraction(text)
        amount = self.reservations.get(node, {}).get(tenant, Amount())
        return Fraction(amount.cpu, self.node_state.share_base.get(node, 100))

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
