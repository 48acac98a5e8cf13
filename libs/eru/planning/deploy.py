"""`plan_deploy`: every node's capacity, the placement mode's counts, and concrete plans for the placed instances."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from eru.planning.capacity import analyse_nodes, check_placements, materialize_analysed, slots_from_analyses
from eru.planning.modes import PlacementRequest, place
from eru.planning.request import NormalizedRequest, PlanningConfig
from eru.planning.resources import ContainerPlan, NodeResources


@dataclass(frozen=True, slots=True)
class DeployPlan:
    """The outcome of one deploy: new instances per node (only nodes that get some), every node's capacity, and the
    concrete plans in node input order."""

    placements: dict[str, int]
    capacities: dict[str, int]
    containers: list[ContainerPlan] = field(default_factory=list)


def plan_deploy(
    nodes: Sequence[NodeResources],
    request: NormalizedRequest,
    config: PlanningConfig,
    *,
    mode: str,
    count: int,
    nodes_limit: int = 0,
    counts: Mapping[str, int] | None = None,
    options: Mapping[str, Any] | None = None,
) -> DeployPlan:
    """Plan `count` new instances (for `each`/`fill`, the per-node number) of `request` over `nodes` with `mode`.

    Raises `PlanningFailure` with the numbers when the mode cannot place them, `InvalidInput` for malformed input.
    """
    analyses = analyse_nodes(nodes, request, config)
    slots = slots_from_analyses(nodes, analyses, request, counts or {})
    placements = place(mode, slots, PlacementRequest(count, nodes_limit, options or {}))
    check_placements(nodes, placements)
    containers = materialize_analysed(nodes, analyses, request, placements)
    capacities = {slot.name: slot.capacity for slot in slots}
    return DeployPlan(placements, capacities, containers)
