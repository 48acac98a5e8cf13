"""`Plan` and `Rejection`: the typed outcome of the deploy decision (docs/pipeline.md "The decision").

A `Plan` lists, per node, the new instances and each instance's cores (pieces per core), NUMA node and memory; a
`Rejection` carries the `PlanningFailure` with, per node, the numbers of the resource that was short
(`eru.planning.explain`). Both answer in the `eru plan` form (`answer()`); the allocator records a plan's answer
with the capacity of the nodes placed on only (`Plan.recorded_answer`), which readers expand to exactly `answer()`
(`eru.decision_answer`), so `eru replay` compares like with like.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eru.errors import PlanningFailure
from eru.planning.resources import ContainerPlan


@dataclass(frozen=True, slots=True)
class Plan:
    """New instances per node (only nodes that get some), every considered node's capacity, the concrete plans in
    node order, and the nodes the pod's eviction memory avoided (node → why)."""

    placements: Mapping[str, int]
    capacities: Mapping[str, int]
    containers: tuple[ContainerPlan, ...]
    avoided: Mapping[str, str]

    @property
    def total(self) -> int:
        """Instances placed."""
        return sum(self.placements.values())

    def on_node(self, node: str) -> tuple[ContainerPlan, ...]:
        """The instances placed on `node`."""
        return tuple(plan for plan in self.containers if plan.node == node)

    def answer(self) -> dict[str, Any]:
        """The `eru plan` answer of kind `deploy` (docs/planning.md)."""
        answer: dict[str, Any] = {
            "deploy": dict(self.placements),
            "capacity": dict(self.capacities),
            "total": self.total,
            "containers": [plan.to_dict() for plan in self.containers],
        }
        if self.avoided:
            answer["avoided"] = dict(self.avoided)
        return answer

    def recorded_answer(self) -> dict[str, Any]:
        """The answer as the allocator records it (docs/replay.md "A decision's answer, the nodes placed on"): the
        `capacity` of the nodes placed on only, marked `"capacity_listed": "placed"`; every other node's capacity
        follows from the recorded input (`eru.decision_answer.full_answer` puts them back). A plan on every node
        is recorded as `answer()`: the mark would only add to it."""
        capacities = self.capacities
        if len(self.placements) >= len(capacities):
            return self.answer()
        answer: dict[str, Any] = {
            "deploy": dict(self.placements),
            "capacity": {name: capacities[name] for name in self.placements},
            CAPACITY_LISTED: PLACED,
            "total": self.total,
            "containers": [plan.to_dict() for plan in self.containers],
        }
        if self.avoided:
            answer["avoided"] = dict(self.avoided)
        return answer


CAPACITY_LISTED = "capacity_listed"
"""The key of a recorded answer whose `capacity` lists only some nodes; its value says which (`PLACED`)."""
PLACED = "placed"


@dataclass(frozen=True, slots=True)
class Rejection:
    """A valid request that does not fit: the failure (code, message, and per node the short resource in
    `details["resources"]`) and the nodes avoided."""

    failure: PlanningFailure
    avoided: Mapping[str, str]

    def answer(self) -> dict[str, Any]:
        """The decision record's output for a refusal (`{"error": {...}}`)."""
        return {"error": self.failure.to_dict()}


Outcome = Plan | Rejection
"""What `decide` returns."""
