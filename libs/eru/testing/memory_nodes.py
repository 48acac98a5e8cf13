"""The nodes capability (`eru.store.nodes.NodeStore`) in memory, mixed into `InMemoryStore` (eru.testing.memory_store):
the same answers as PostgreSQL's `PgNodes` (the contract suite, tests/integration/store/test_nodes_contract.py, runs
both). Heartbeats share the container events capability's clock and record (`MemoryContainerEvents.heartbeat`); what
`MemoryNode` does not carry (pieces per core, the agent's and the operator's labels apart) is kept beside it
(`MemoryNodeState`). `change_node` writes nothing when a callback raises, as PostgreSQL's transaction rolls back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from eru.domain.colocation import NodeCondition
from eru.planning import NodeResources
from eru.store.nodes import ConditionChange, NodeCapacity, NodeRecord, NodeStore
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


def _conforms(store: MemoryNodes) -> NodeStore:
    """Where mypy checks that `MemoryNodes` is a `NodeStore`."""
    return store
