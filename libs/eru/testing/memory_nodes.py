"""The nodes capability (`eru.store.nodes.NodeStore`) in memory, mixed into `InMemoryStore` (eru.testing.memory_store):
the same answers as PostgreSQL's `PgNodes` (the contract suite, tests/integration/store/test_nodes_contract.py, runs
both). Heartbeats share the container events capability's clock and record (`MemoryContainerEvents.heartbeat`); what
`MemoryNode` does not carry (pieces per core, the agent's and the operator's labels apart, the nodes' kept inventories)
is kept beside it (`MemoryNodeState`). `change_node` writes nothing when a callback raises, as PostgreSQL's
transaction rolls back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from eru.domain.colocation import NodeCondition
from eru.domain.inventory import NodeInventory
from eru.planning import NodeResources
from eru.reconcile import LedgerRow
from eru.store.nodes import ConditionChange, KeptInventory, NodeCapacity, NodeRecord, NodeStore
from eru.store.protocol import OutboxMessage, WaitRow
from eru.testing.memory_containers import MemoryContainerEvents

GONE = frozenset({"removed", "failed", "lost"})


class _Node(Protocol):
    """The part of `MemoryNode` (eru.testing.memory_store) this capability reads and changes."""

    resources: NodeResources
    pod: str
    state: str
    cordoned: bool
    conditions: Mapping[str, Any]
    labels: Mapping[str, str]


@dataclass
class MemoryNodeState:
    """What the nodes capability keeps beside `MemoryNode`."""

    share_base: dict[str, int] = field(default_factory=dict)
    agent_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    operator_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    woken: list[str] = field(default_factory=list)
    """The pods whose admission passes were woken, in order (PostgreSQL: pg_notify('eru_admission', pod))."""
    inventories: dict[str, tuple[NodeInventory, float]] = field(default_factory=dict)
    """Node → its newest kept inventory and when it was received (the store's clock)."""


class MemoryNodes(MemoryContainerEvents):
    """`NodeStore` over the store's `nodes`, `pods`, `containers` and `waits` (see the module doc)."""

    pods: dict[str, dict[str, Any]]
    nodes: Mapping[str, _Node]
    waits: list[WaitRow]
    outbox: list[OutboxMessage]

    def add_node(self, pod: str, node: NodeResources, **fields: Any) -> None:
        """Add or replace a node of `pod` (defined by the store)."""
        raise NotImplementedError

    @property
    def node_state(self) -> MemoryNodeState:
        """The capability's own state, made on first use."""
        state = self.__dict__.get("_node_state")
        if state is None:
            state = self.__dict__["_node_state"] = MemoryNodeState()
        assert isinstance(state, MemoryNodeState)
        return state

    def _ensure_pod(self, pod: str) -> None:
        self.pods.setdefault(pod, {})

    def _record(self, name: str) -> NodeRecord | None:
        node = self.nodes.get(name)
        if node is None:
            return None
        state, resources = self.node_state, node.resources
        capacity = NodeCapacity(
            name,
            node.pod,
            dict(resources.cpu_map),
            resources.memory,
            dict(resources.numa),
            dict(resources.numa_memory),
            state.share_base.get(name, 100),
            dict(state.agent_labels.get(name, {})),
        )
        return NodeRecord(
            capacity,
            dict(state.operator_labels.get(name, {})),
            dict(resources.used_cpu_map),
            resources.used_memory,
        )

    def _write(self, capacity: NodeCapacity, pod: str, operator_labels: Mapping[str, str] | None = None) -> None:
        state = self.node_state
        node = self.nodes.get(capacity.name)
        if node is None:
            self.add_node(pod, NodeResources(capacity.name, {}, 0))
            node = self.nodes[capacity.name]
        node.resources = replace(
            node.resources,
            cpu_map=dict(capacity.cpu_map),
            memory=capacity.memory,
            numa=dict(capacity.numa),
            numa_memory=dict(capacity.numa_memory),
        )
        node.pod, node.state = pod, "up"
        state.share_base[capacity.name] = capacity.share_base
        state.agent_labels[capacity.name] = dict(capacity.labels)
        if operator_labels is not None:
            state.operator_labels[capacity.name] = dict(operator_labels)
        node.labels = {**state.agent_labels[capacity.name], **state.operator_labels.get(capacity.name, {})}

    async def register(self, nodes: Sequence[NodeCapacity]) -> None:
        """Capacities written (a known node keeps its pod), state `up`, heartbeats now."""
        for node in nodes:
            self._ensure_pod(node.pod)
        for node in nodes:
            known = self.nodes.get(node.name)
            self._write(node, known.pod if known is not None else node.pod)
            self.heartbeat(node.name)

    async def heartbeats(self, names: Sequence[str]) -> set[str]:
        """The known nodes of `names` heard from now."""
        known = {name for name in names if name in self.nodes}
        for name in known:
            self.heartbeat(name)
        return known

    async def write_conditions(self, conditions: Sequence[NodeCondition]) -> list[ConditionChange]:
        """The newest condition of each known node, unless the stored one is newer."""
        newest: dict[str, NodeCondition] = {}
        for condition in conditions:
            if condition.node not in newest or condition.time > newest[condition.node].time:
                newest[condition.node] = condition
        changes = []
        for name, condition in sorted(newest.items()):
            node = self.nodes.get(name)
            if node is None:
                continue
            stored = node.conditions.get("time")
            if stored is not None and float(stored) > condition.time:
                continue
            after = json.loads(condition.model_dump_json())
            changes.append(ConditionChange(name, node.pod, dict(node.conditions), after))
            node.conditions = after
        return changes

    async def wake_admission(self, pod: str) -> None:
        """Note the pod's wake when requests wait there."""
        if any(wait.pod == pod for wait in self.waits):
            self.node_state.woken.append(pod)

    async def set_cordoned(self, name: str, cordoned: bool) -> bool:
        """Cordon or uncordon node `name`; False when unknown."""
        node = self.nodes.get(name)
        if node is None:
            return False
        node.cordoned = cordoned
        return True

    async def change_node(
        self,
        name: str,
        change: Callable[[NodeRecord | None], NodeRecord],
        check_move: Callable[[str, int], None],
    ) -> NodeRecord | None:
        """Write `change(current)` after `check_move` when the node moves; nothing when either raises."""
        current = self._record(name)
        new = change(current)
        pod = new.capacity.pod
        if current is not None and pod != current.capacity.pod:
            live = sum(1 for row in self.containers.values() if row.node == name and row.state not in GONE)
            check_move(current.capacity.pod, live)
        self._ensure_pod(pod)
        self._write(new.capacity, pod, new.operator_labels)
        return current

    async def create_pod(self, name: str) -> bool:
        """Create pod `name` (no policy) unless it exists."""
        if name in self.pods:
            return False
        self._ensure_pod(name)
        return True

    async def queue_commands(self, commands: Sequence[OutboxMessage]) -> None:
        """Onto the store's `outbox`, a repeated envelope id dropped."""
        for command in commands:
            if all(queued.envelope.id != command.envelope.id for queued in self.outbox):
                self.outbox.append(command)

    async def keep_inventories(self, inventories: Sequence[NodeInventory]) -> list[str]:
        """Each kept unless its node's kept one was taken at the same time or later; received now."""
        kept = self.node_state.inventories
        stored = []
        for inventory in inventories:
            found = kept.get(inventory.node)
            if found is None or found[0].taken_at < inventory.taken_at:
                kept[inventory.node] = (inventory, self.now)
                stored.append(inventory.node)
        return sorted(stored)

    async def node_cores(self, names: Collection[str]) -> dict[str, list[str]]:
        """The cores of the registered nodes of `names`."""
        return {name: list(self.nodes[name].resources.cpu_map) for name in names if name in self.nodes}

    async def ledgers(self, listed: Mapping[str, Collection[str]]) -> dict[str, list[LedgerRow]]:
        """Each node's containers not gone, and those its inventory lists whatever their state."""
        changed = self.event_state.updated_at
        found: dict[str, list[LedgerRow]] = {node: [] for node in listed}
        for row in sorted(self.containers.values(), key=lambda row: row.id):
            if row.node not in found or (row.state in GONE and row.id not in listed[row.node]):
                continue
            pending = any(r.replaces == row.id and r.state in ("planned", "creating") for r in self.containers.values())
            found[row.node].append(
                LedgerRow(
                    container_id=row.id,
                    state=row.state,
                    updated_at=changed.get(row.id, self.now),
                    allocation=json.loads(row.allocation),
                    priority_class=row.priority_class,
                    pending_replacement=pending,
                )
            )
        return found

    async def kept_inventories(self, node: str | None, pod: str | None) -> list[KeptInventory]:
        """The registered nodes' kept inventories (of `node`, in `pod`), by node, aged on the store's clock."""
        return [
            KeptInventory(name, inventory, self.now - received)
            for name, (inventory, received) in sorted(self.node_state.inventories.items())
            if name in self.nodes and (node is None or name == node) and (pod is None or self.nodes[name].pod == pod)
        ]


def _conforms(store: MemoryNodes) -> NodeStore:
    """Where mypy checks that `MemoryNodes` is a `NodeStore`."""
    return store
