"""`InMemoryStore`: the allocator's `AllocatorStore` (eru.store.protocol) in memory, for unit tests and the simulator
(docs/architecture.md "The decision and its seams"), shipped with eru like structlog's `testing` module.

It keeps what the deploy path reads and writes (pods and their policies, nodes with usage and conditions, containers,
deploys, decisions, waits, tenants, reservations, evictions, the outbox) as plain Python values. A pod session holds
an asyncio lock per pod; `submit` is applied when the session's block ends normally and dropped when it raises, as
a transaction is; a request key already stored raises `Conflict`. It answers snapshots by the same rules as the
PostgreSQL store (docs/pipeline.md): nodes up and not cordoned in name order, live containers, the batch allowance
of each node's condition less the batch instances not yet running, evictions within the decay.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from eru.colocation.backoff import Eviction
from eru.fairness.drf import Tenant, TenantUsage
from eru.fairness.ledger import parent_of
from eru.planning import NodeResources, PlanningConfig
from eru.planning.batch import allowance_from_condition, less_placed
from eru.planning.left_out import NodeState, condition_marks
from eru.planning.reservations import Amount
from eru.planning.snapshot import ClusterSnapshot, EvictionHistory, instance_demand, qos_mix
from eru.store.plans import Plan, PlanResult, recheck
from eru.store.protocol import (
    AllocatorStore,
    Conflict,
    ContainerRow,
    DecisionRow,
    DecisionSnapshotRow,
    DeployRow,
    OutboxMessage,
    PodWrites,
    SnapshotNeeds,
    StoredDeploy,
    Usage,
    WaitRow,
)
from eru.store.waits import AdmissionQueue
from eru.testing.memory_delivery import MemoryDelivery
from eru.testing.memory_kept import MemoryKept
from eru.testing.memory_nodes import MemoryNodes
from eru.testing.memory_operations import MemoryOperations
from eru.testing.memory_queries import MemoryQueries
from eru.testing.memory_tenants import GONE, MemoryTenants, stored_need
from eru.testing.memory_waits import MemoryWaits, MemoryWaitSession, WaitChanges
from eru.testing.memory_watermarks import MemoryWatermarks


@dataclass
class MemoryNode:
    """A node as the store keeps it: its resources with usage, pod, state, cordon flag and last condition."""

    resources: NodeResources
    pod: str
    state: str = "up"
    cordoned: bool = False
    conditions: Mapping[str, Any] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    """The node's effective labels (the agent's overlaid by the operator's)."""


class InMemoryStore(
    MemoryTenants,
    MemoryOperations,
    MemoryQueries,
    MemoryNodes,
    MemoryKept,
    MemoryDelivery,
    MemoryWaits,
    MemoryWatermarks,
):
    """An `AllocatorStore` in memory (see the module doc), with the tenants, container events, nodes, kept
    instances, queries, operations, delivery, waits and watermark overrides capabilities. Fill it with `add_pod`,
    `add_node`, `add_tenant`."""

    def __init__(self, *, now: float = 0.0) -> None:
        self.now = now
        self.pods: dict[str, dict[str, Any]] = {}
        self.nodes: dict[str, MemoryNode] = {}
        self.containers: dict[str, ContainerRow] = {}
        self.deploys: dict[str, DeployRow] = {}
        self.decisions: dict[str, DecisionRow] = {}
        self.decision_snapshots: dict[str, DecisionSnapshotRow] = {}
        self.waits: list[WaitRow] = []
        self.wait_times: dict[str, tuple[int, float]] = {}
        self.wait_arrivals = 0
        self.wake_listeners: list[Callable[[str], None]] = []
        self.outbox: list[OutboxMessage] = []
        self.tenants: dict[str, Tenant] = {"default": Tenant("default")}
        self.reservations: dict[str, dict[str, Amount]] = {}
        self.evictions: list[Eviction] = []
        self.submits = 0
        self.admission_wakes = 0
        self._locks: dict[str, asyncio.Lock] = {}

    # ------------------------------------------------------------------------------------------------ filling
    def add_pod(self, name: str, policy: Mapping[str, Any] | None = None) -> None:
        """Create a pod with a policy object (security keys, `scorers`)."""
        self.pods[name] = dict(policy or {})

    def add_node(self, pod: str, node: NodeResources, **fields: Any) -> None:
        """Add or replace a node of `pod` (`state`, `cordoned`, `conditions` as keywords)."""
        self.nodes[node.name] = MemoryNode(node, pod, **fields)

    def add_tenant(self, tenant: Tenant) -> None:
        """Add or replace a tenant or group."""
        self.tenants[tenant.name] = tenant

    # ----------------------------------------------------------------------------------------------- the seam
    async def live_counts(self, pod: str, workloads: Collection[str]) -> dict[str, dict[str, int]]:
        """Live counts of `workloads` in `pod`, committed state, without the pod's lock."""
        counts: dict[str, dict[str, int]] = {}
        for row in self.live(pod):
            if row.workload in workloads:
                per_node = counts.setdefault(row.workload, {})
                per_node[row.node] = per_node.get(row.node, 0) + 1
        return counts

    @asynccontextmanager
    async def pod(self, pod: str) -> AsyncIterator[MemoryPodSession]:
        """Lock `pod` for the block; what was submitted is applied when the block ends normally."""
        async with self._locks.setdefault(pod, asyncio.Lock()):
            session = MemoryPodSession(self, pod)
            yield session
            self.apply_wait_changes(session.wait_changes)
            for writes in session.pending:
                self._apply(writes)
            self.wake_waiting(wait.pod for writes in session.pending for wait in writes.waits)

    @asynccontextmanager
    async def deploy_batch(self, pod: str) -> AsyncIterator[MemoryPodSession]:
        """`pod` (the lock is taken at once: an asyncio lock costs no round trip)."""
        async with self.pod(pod) as session:
            yield session

    def _apply(self, writes: PodWrites) -> None:
        self.submits += 1
        for row in writes.decisions:
            self.decisions[row.id] = row
        for snapshot in writes.decision_snapshots:
            self.decision_snapshots[snapshot.id] = snapshot
        for deploy in writes.deploys:
            self.deploys[deploy.id] = deploy
        for container in writes.containers:
            self.containers[container.id] = container
        for name, usages in writes.usage.items():
            node = self.nodes[name]
            node.resources = _charged(node.resources, usages)
        self.note_waits(writes.waits)
        self.outbox += writes.messages

    def with_applied(self, pending: Sequence[PodWrites]) -> InMemoryStore:
        """A copy of the store with `pending` applied (what a session that submitted them reads), `self` unchanged."""
        if not pending:
            return self
        view = copy.copy(self)
        view.nodes = {name: replace(node) for name, node in self.nodes.items()}
        view.containers, view.deploys = dict(self.containers), dict(self.deploys)
        view.decisions, view.decision_snapshots = dict(self.decisions), dict(self.decision_snapshots)
        view.waits, view.outbox = list(self.waits), list(self.outbox)
        view.wait_times = dict(self.wait_times)
        for writes in pending:
            view._apply(writes)
        view.submits = self.submits
        return view

    def decision_input(self, decision_id: str) -> dict[str, Any]:
        """A recorded decision's full input (its snapshot's nodes put back: `eru.planning.decision_record`)."""
        return self.expanded(json.loads(self.decisions[decision_id].input))

    def live(self, pod: str) -> list[ContainerRow]:
        """The pod's containers that hold resources."""
        return [row for row in self.containers.values() if row.pod == pod and row.state not in GONE]


def _charged(node: NodeResources, usages: Sequence[Usage]) -> NodeResources:
    cpu = dict(node.used_cpu_map)
    numa = dict(node.used_numa_memory)
    memory = node.used_memory
    for usage in usages:
        for core, pieces in usage.cpu_map.items():
            cpu[core] = cpu.get(core, 0) + pieces
        for numa_id, amount in usage.numa_memory.items():
            numa[numa_id] = numa.get(numa_id, 0) + amount
        memory += usage.memory
    return replace(node, used_cpu_map=cpu, used_memory=memory, used_numa_memory=numa)


class MemoryPodSession(MemoryWaitSession):
    """One pod's session on an `InMemoryStore` (its waits: `MemoryWaitSession`)."""

    def __init__(self, store: InMemoryStore, pod: str) -> None:
        self.store = store
        self.pod = pod
        self.pending: list[PodWrites] = []
        self.wait_changes = WaitChanges()

    def waits_store(self) -> MemoryWaits:
        """The store the session's waits live in."""
        return self.store

    async def policy(self) -> Mapping[str, Any] | None:
        """The pod's policy object, None when the pod does not exist."""
        return self.store.pods.get(self.pod)

    async def pod_names(self, limit: int) -> list[str]:
        """Some pod names in name order."""
        return sorted(self.store.pods)[:limit]

    async def policy_and_deploys(self, keys: Sequence[str]) -> tuple[Mapping[str, Any] | None, dict[str, StoredDeploy]]:
        """`policy()` and `find_deploys(keys)`."""
        return await self.policy(), await self.find_deploys(keys)

    async def open_batch(
        self, keys: Sequence[str], needs: SnapshotNeeds
    ) -> tuple[Mapping[str, Any] | None, dict[str, StoredDeploy], ClusterSnapshot]:
        """`policy_and_deploys(keys)` and `snapshot(needs)`."""
        policy, existing = await self.policy_and_deploys(keys)
        return policy, existing, await self.snapshot(needs)

    async def find_deploys(self, keys: Sequence[str]) -> dict[str, StoredDeploy]:
        """What each request key already ended in."""
        wanted = set(keys)
        return {
            row.request_id: StoredDeploy(row.id, row.request_id, row.status, row.result, None)
            for row in self.store.deploys.values()
            if row.request_id in wanted
        }

    async def snapshot(self, needs: SnapshotNeeds) -> ClusterSnapshot:
        """The pod's snapshot, by the PostgreSQL store's rules (what this session submitted already counted)."""
        store, config = self.store.with_applied(self.pending), needs.config
        mine = sorted(
            (n for n in store.nodes.values() if n.pod == self.pod and n.state == "up" and not n.cordoned),
            key=lambda n: n.resources.name,
        )
        live = store.live(self.pod)
        counts: dict[str, dict[str, int]] = {}
        for row in live:
            if needs.workloads is not None and row.workload not in needs.workloads:
                continue
            per_node = counts.setdefault(row.workload, {})
            per_node[row.node] = per_node.get(row.node, 0) + 1
        forbid = frozenset(
            n.resources.name
            for n in mine
            if n.conditions.get("forbid_schedule_cpu") or n.conditions.get("forbid_schedule_memory")
        )
        reservations = {
            node: dict(per_tenant) for node, per_tenant in store.reservations.items() if node in store.nodes
        }
        held: dict[tuple[str, str], Amount] = {}
        if reservations:
            for row in live:
                need = stored_need(row.resources, config)
                if need is not None and row.replaces is None:
                    key = (parent_of(row.tenant), row.node)
                    amount = Amount(need.cpu_request if need.cpu_bind else 0, need.memory_request)
                    held[key] = held.get(key, Amount()).plus(amount)
        nodes = [n.resources for n in mine]
        unschedulable = {
            name: NodeState(n.cordoned, n.state != "up")
            for name, n in sorted(store.nodes.items())
            if n.pod == self.pod and (n.state != "up" or n.cordoned)
        }
        snapshot = ClusterSnapshot(
            config=config,
            nodes=tuple(nodes),
            counts=counts,
            forbid_batch=forbid,
            watermarks={name: condition_marks(store.nodes[name].conditions) for name in sorted(forbid)},
            unschedulable=unschedulable,
            reservations=reservations,
            held=held,
            tenants=dict(store.tenants),
            pod=self.pod,
            counted=needs.workloads,
        )
        if needs.labels:
            pod_nodes = {name: n for name, n in store.nodes.items() if n.pod == self.pod}
            snapshot = replace(snapshot, labels={name: dict(n.labels) for name, n in sorted(pod_nodes.items())})
        if reservations or any(t.limit or t.quota for t in store.tenants.values()):
            snapshot = replace(snapshot, tenant_usage=await self.tenant_usage(config))
        if needs.score:
            weights = (store.pods.get(self.pod) or {}).get("scorers")
            needs_by_node = [(row.node, stored_need(row.resources, config)) for row in live]
            qos = qos_mix((node, need) for node, need in needs_by_node if need is not None)
            pod_weights = {str(k): float(v) for k, v in weights.items()} if isinstance(weights, dict) else None
            snapshot = replace(snapshot, qos=qos, pod_weights=pod_weights)
        if needs.batch:
            snapshot = replace(
                snapshot,
                nodes=tuple(self._with_allowances(mine, live, config)),
                evictions=EvictionHistory(
                    store.now,
                    tuple(e for e in store.evictions if e.time > store.now - needs.keep.avoid_decay_seconds),
                    needs.keep,
                ),
            )
        return snapshot

    @staticmethod
    def _with_allowances(
        mine: Sequence[MemoryNode], live: Sequence[ContainerRow], config: PlanningConfig
    ) -> list[NodeResources]:
        placed: dict[str, tuple[int, int]] = {}
        for row in live:
            need = stored_need(row.resources, config)
            if row.priority_class == "batch" and row.state in ("planned", "creating") and need is not None:
                cpu, memory = placed.get(row.node, (0, 0))
                placed[row.node] = (cpu + need.cpu_request, memory + need.memory_request)
        result = []
        for node in mine:
            allowance = allowance_from_condition(dict(node.conditions), config.share_base)
            cpu_left, memory_left = less_placed(allowance, *placed.get(node.resources.name, (0, 0)))
            if cpu_left is None and memory_left is None:
                result.append(node.resources)
            else:
                result.append(replace(node.resources, batch_cpu=cpu_left, batch_memory=memory_left))
        return result

    async def tenant_usage(self, config: PlanningConfig) -> dict[str, TenantUsage]:
        """What each tenant and group holds in this pod."""
        usage: dict[str, TenantUsage] = {}
        for row in self.store.live(self.pod):
            need = stored_need(row.resources, config)
            if need is None or row.replaces is not None:
                continue
            demand = instance_demand(need, config.share_base)
            usage[row.tenant] = usage.get(row.tenant, TenantUsage()).plus(demand, 1)
        return usage

    async def peek_batch(
        self, keys: Sequence[str], needs: SnapshotNeeds
    ) -> tuple[Mapping[str, Any] | None, dict[str, StoredDeploy], ClusterSnapshot]:
        """`open_batch` (the memory store's lock is taken with the session and costs no round trip)."""
        return await self.open_batch(keys, needs)

    async def release(self) -> None:
        """Nothing: the memory store's lock is an asyncio lock held for the block (no bus round trip waits on a
        server-side lock here)."""

    async def has_waiting(self, *, lock: bool = True) -> bool:
        """Whether requests of this pod wait for admission."""
        return any(wait.pod == self.pod for wait in self.store.waits)

    async def submit(self, writes: PodWrites) -> None:
        """Queue the batch for the end of the session; `Conflict` when a request key is stored already."""
        stored = {row.request_id for row in self.store.deploys.values()}
        stored |= {row.request_id for pending in self.pending for row in pending.deploys}
        if any(row.request_id in stored for row in writes.deploys):
            raise Conflict("a request id of this batch was committed concurrently")
        self.pending.append(writes)

    async def submit_plan(self, plan: Plan) -> PlanResult:
        """Re-check the nodes `plan` touches against the store as this session leaves it, queue the parts whose
        nodes all pass (eru.store.plans) with `submit` (its key check), and refresh the snapshot when a node was
        rejected."""
        now = self.store.with_applied(self.pending)
        rejected: dict[str, str] = {}
        for name, charge in plan.touched.items():
            node = now.nodes.get(name)
            mine = node if node is not None and node.pod == self.pod else None
            reason = recheck(
                None if mine is None else mine.resources,
                charge,
                up=mine is None or mine.state == "up",
                cordoned=mine is not None and mine.cordoned,
            )
            if reason is not None:
                rejected[name] = reason
        kept = plan.kept_without(rejected) if rejected else list(range(len(plan.parts)))
        written = plan.writes_for(kept) if kept or not plan.parts else None
        if written is not None:
            await self.submit(written)
        if not rejected:
            return PlanResult(tuple(kept), written=written)
        return PlanResult(tuple(kept), rejected, await self.snapshot(plan.needs), written)


__all__ = ["GONE", "InMemoryStore", "MemoryNode", "MemoryPodSession"]


def _conforms(store: InMemoryStore) -> tuple[AllocatorStore, AdmissionQueue]:
    """Where mypy checks that `InMemoryStore` is an `AllocatorStore` and an `AdmissionQueue`."""
    return store, store
