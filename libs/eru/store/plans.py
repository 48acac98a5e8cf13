"""`Plan` and `PlanResult`: what the deploy loop hands the store and what it gets back (docs/pipeline.md "The deploy
loop"), after Nomad's `Planner.SubmitPlan`.

A `Plan` is one pod's batch as decided against a snapshot: every row to write (`writes`, in the order the requests
were decided) and, per request, its `PlanPart`: which slice of each list of rows is its own and what it charges
each node. The store re-checks only the nodes the plan touches against the newest state (`recheck`: the node is
still the pod's, up, not cordoned, and the plan's charge fits what is free there now), in the statement or
transaction that writes, with those node rows locked in name order. A part whose nodes all pass is committed;
a part that touches a rejected node is dropped, and its request is decided again against `refreshed_snapshot`.
Nothing is ever charged beyond a node's capacity.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from eru.planning.resources import NodeResources
from eru.planning.snapshot import ClusterSnapshot
from eru.store.protocol import OutboxMessage, PodWrites, SnapshotNeeds, Usage

Span = tuple[int, int]
"""A half-open range of one list of `PodWrites`."""

CommandMessages = Callable[[dict[str, list[Any]]], list[OutboxMessage]]
"""node → the create commands of the kept parts there → the command messages (one per node): the allocator's
`creates.command_messages`, kept opaque here."""


@dataclass(frozen=True, slots=True)
class PlanPart:
    """One request's share of a `Plan`: its rows (a span of each list of the plan's writes), what it charges each
    node, and its create commands per node (merged with the other kept parts' into one message per node)."""

    decisions: Span = (0, 0)
    deploys: Span = (0, 0)
    containers: Span = (0, 0)
    messages: Span = (0, 0)
    waits: Span = (0, 0)
    usage: Mapping[str, tuple[Usage, ...]] = field(default_factory=dict)
    commands: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)

    @property
    def nodes(self) -> frozenset[str]:
        """The nodes this part charges."""
        return frozenset(self.usage)


@dataclass(frozen=True, slots=True)
class Plan:
    """One pod's batch to commit (see the module doc). `writes` is the whole batch, command messages included: what
    is written when every touched node passes. `command_messages` rebuilds those messages for the parts kept when
    some node is rejected. `needs` says what the refreshed snapshot must hold."""

    pod: str
    writes: PodWrites
    parts: tuple[PlanPart, ...]
    needs: SnapshotNeeds
    command_messages: CommandMessages | None = None

    @property
    def touched(self) -> dict[str, Usage]:
        """node → everything the plan charges there, in name order: the nodes `submit_plan` re-checks."""
        return {name: total_usage(self.writes.usage[name]) for name in sorted(self.writes.usage)}

    def writes_for(self, kept: Collection[int]) -> PodWrites:
        """The rows of the parts at `kept` (indexes into `parts`): the whole `writes` when every part is kept, else
        each kept part's slices in order, with their command messages merged again per node."""
        if len(kept) == len(self.parts):
            return self.writes
        whole, chosen = self.writes, [self.parts[index] for index in sorted(kept)]
        writes = PodWrites(
            decision_snapshots=list(whole.decision_snapshots) if chosen else [],
            hold_seconds=whole.hold_seconds,
        )
        commands: dict[str, list[Any]] = {}
        for part in chosen:
            writes.decisions += whole.decisions[slice(*part.decisions)]
            writes.deploys += whole.deploys[slice(*part.deploys)]
            writes.containers += whole.containers[slice(*part.containers)]
            writes.messages += whole.messages[slice(*part.messages)]
            writes.waits += whole.waits[slice(*part.waits)]
            for name, usages in part.usage.items():
                writes.usage.setdefault(name, []).extend(usages)
            for name, planned in part.commands.items():
                commands.setdefault(name, []).extend(planned)
        if commands and self.command_messages is not None:
            writes.messages += self.command_messages(commands)
        return writes

    def kept_without(self, rejected: Collection[str]) -> list[int]:
        """The indexes of the parts that charge none of the `rejected` nodes."""
        return [index for index, part in enumerate(self.parts) if not part.nodes & frozenset(rejected)]


@dataclass(frozen=True, slots=True)
class PlanResult:
    """What `submit_plan` did: the indexes of the parts committed, the touched nodes it rejected (node → why), and
    when it rejected any, the pod's snapshot read after the commit (what the dropped parts are decided again
    against; Nomad's `RefreshIndex`)."""

    committed: tuple[int, ...]
    rejected_nodes: Mapping[str, str] = field(default_factory=dict)
    refreshed_snapshot: ClusterSnapshot | None = None
    written: PodWrites | None = None
    """The rows committed (`Plan.writes_for(committed)`): what the committing process publishes itself."""

    @property
    def full_commit(self) -> bool:
        """Whether nothing was rejected."""
        return not self.rejected_nodes


def total_usage(usages: Sequence[Usage]) -> Usage:
    """The sum of `usages` (cores' pieces, bytes, bytes per NUMA node)."""
    if len(usages) == 1:
        return usages[0]
    cpu: dict[str, int] = {}
    numa: dict[str, int] = {}
    memory = 0
    for usage in usages:
        for core, pieces in usage.cpu_map.items():
            cpu[core] = cpu.get(core, 0) + pieces
        for numa_id, amount in usage.numa_memory.items():
            numa[numa_id] = numa.get(numa_id, 0) + amount
        memory += usage.memory
    return Usage(cpu, memory, numa)


def recheck(node: NodeResources | None, charge: Usage, *, up: bool = True, cordoned: bool = False) -> str | None:
    """Why `node` as it stands now cannot take `charge` (None: it can): gone, down, cordoned, or the cores, memory
    or NUMA memory it would need beyond what is free. The same rule as the PostgreSQL statement's check
    (`eru_allocator.store.submit_plan.SUBMIT_PLAN_SQL`)."""
    if node is None:
        return "gone"
    if not up:
        return "down"
    if cordoned:
        return "cordoned"
    if node.used_memory + charge.memory > node.memory:
        return "memory"
    for core, pieces in charge.cpu_map.items():
        if pieces > 0 and node.used_cpu_map.get(core, 0) + pieces > node.cpu_map.get(core, 0):
            return "cpu"
    for numa_id, amount in charge.numa_memory.items():
        capacity = node.numa_memory.get(numa_id)
        if capacity is not None and amount > 0 and node.used_numa_memory.get(numa_id, 0) + amount > capacity:
            return "numa_memory"
    return None


__all__ = ["CommandMessages", "Plan", "PlanPart", "PlanResult", "Span", "recheck", "total_usage"]
