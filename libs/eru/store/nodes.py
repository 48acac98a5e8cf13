"""The nodes capability of the allocator's store (docs/store.md "Capabilities"): what node agents report (registration,
heartbeats, conditions) and what operators change (a node's capacity, pod and labels; cordon). Implemented by
PostgreSQL (`eru_allocator.store.node_store.PgNodes`) and in memory (`eru.testing.memory_nodes`); the contract suite
(tests/integration/store/test_nodes_contract.py) runs the same cases against both.

Capacity changes never touch usage: a capacity below it is allowed (the node then takes nothing new). Registration
and `change_node` take the pod locks, so no deploy plans against a capacity being changed. `change_node` is atomic:
its callbacks run inside the transaction and an exception from one leaves everything as it was.

Node agents' inventories (docs/operations.md "Reconciling the ledger") are kept here too, the newest per node, with
what the reconciler compares them with: each node's cores and the containers the ledger holds on it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from eru.domain.colocation import NodeCondition
from eru.domain.inventory import NodeInventory
from eru.reconcile import LedgerRow
from eru.store.protocol import OutboxMessage


@dataclass(frozen=True)
class NodeCapacity:
    """A node's capacity as a node agent registers it or an operator sets it: its pod, cores (core → pieces),
    memory (bytes), NUMA layout (core → NUMA node, NUMA node → bytes), pieces per core and the agent's labels."""

    name: str
    pod: str
    cpu_map: Mapping[str, int]
    memory: int
    numa: Mapping[str, str] = field(default_factory=dict)
    numa_memory: Mapping[str, int] = field(default_factory=dict)
    share_base: int = 100
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeRecord:
    """A known node as an operator's change reads it: its capacity, the operator's labels and what it uses."""

    capacity: NodeCapacity
    operator_labels: Mapping[str, str] = field(default_factory=dict)
    used_cpu_map: Mapping[str, int] = field(default_factory=dict)
    used_memory: int = 0


@dataclass(frozen=True)
class ConditionChange:
    """A node whose newest condition was written: its pod, the condition before ({} when none) and after."""

    name: str
    pod: str
    before: Mapping[str, Any]
    after: Mapping[str, Any]


@dataclass(frozen=True)
class KeptInventory:
    """A node's newest inventory as kept, and how long ago it was received (seconds)."""

    node: str
    inventory: NodeInventory
    age_seconds: float


class NodeStore(Protocol):
    """Nodes as agents report them and operators change them (see the module doc)."""

    async def register(self, nodes: Sequence[NodeCapacity]) -> None:
        """Write the nodes' capacity in one transaction (state `up`, usage untouched, heartbeat now): a new node
        joins its `pod` (created if needed), a known one stays in its pod; the pods' locks in name order."""

    async def heartbeats(self, names: Sequence[str]) -> set[str]:
        """Mark the nodes `names` alive now; the names of those known."""

    async def write_conditions(self, conditions: Sequence[NodeCondition]) -> list[ConditionChange]:
        """Keep each known node's newest condition by its time (an older one arriving late is ignored; of a batch,
        the newest per node); the nodes whose condition was written."""

    async def wake_admission(self, pod: str) -> None:
        """Wake the admission passes of `pod` when requests wait there."""

    async def set_cordoned(self, name: str, cordoned: bool) -> bool:
        """Cordon or uncordon node `name`; False when unknown."""

    async def change_node(
        self,
        name: str,
        change: Callable[[NodeRecord | None], NodeRecord],
        check_move: Callable[[str, int], None],
    ) -> NodeRecord | None:
        """Write `change(current)` (None: the node is unknown) as node `name`: capacity, pod and operator labels,
        usage untouched, under the lock of its pod (created if needed) and, when it moves, of its old pod, where
        `check_move(old pod, live containers on the node)` may refuse. Returns the node as it was (None: added)."""

    async def create_pod(self, name: str) -> bool:
        """Create pod `name` (no policy) unless it exists; whether it was created."""

    async def queue_commands(self, commands: Sequence[OutboxMessage]) -> None:
        """Queue node commands in the outbox in one transaction, in order (published after it commits); a command
        whose envelope id is queued already is dropped (the reconciler derives ids from what it saw)."""

    async def keep_inventories(self, inventories: Sequence[NodeInventory]) -> list[str]:
        """Keep each of `inventories` (one per node, in node order) unless one of its node taken later or at the same
        time is kept already; the nodes whose inventory was kept, in name order."""

    async def node_cores(self, names: Collection[str]) -> dict[str, list[str]]:
        """Node → its cores, for those of `names` that are registered."""

    async def ledgers(self, listed: Mapping[str, Collection[str]]) -> dict[str, list[LedgerRow]]:
        """What the ledger holds on each node of `listed` (node → the container ids its inventory lists): its
        containers not gone, and those it lists whatever their state (`updated_at`: seconds on the store's clock)."""

    async def kept_inventories(self, node: str | None, pod: str | None) -> list[KeptInventory]:
        """The newest kept inventory of each registered node (of `node`, in `pod`), by node."""


__all__ = ["ConditionChange", "KeptInventory", "NodeCapacity", "NodeRecord", "NodeStore"]
