"""`plan_deploy`: every node's capacity, the placement mode's counts, and concrete plans for the placed instances."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from eru.errors import PlanningFailure
from eru.planning.capacity import analyse_nodes, materialize_analysed, usage_columns
from eru.planning.explain import explain_failure
from eru.planning.modes import PlacementRequest, place_arrays
from eru.planning.request import NormalizedRequest, PlanningConfig
from eru.planning.resources import ContainerPlan, NodeResources

_MODES_WITHOUT_USAGE = frozenset({"auto", "each", "fill"})
"""Built-in modes that never read usage or rate (docs/placement-modes.md), so a deploy need not compute them."""


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
    names = [node.name for node in nodes]
    capacity = [analysis.capacity for analysis in analyses]
    existing = [0] * len(nodes) if not counts else [counts.get(name, 0) for name in names]
    usage: list[float] | None = None
    rate: list[float] | None = None
    if mode not in _MODES_WITHOUT_USAGE:
        usage, rate = usage_columns(nodes, request)
    try:
        placements = place_arrays(
            mode, names, capacity, existing, usage, rate, PlacementRequest(count, nodes_limit, options or {})
        )
    except PlanningFailure as failure:
        raise explain_failure(failure, nodes, analyses, request, config) from None
    containers = materialize_analysed(nodes, analyses, request, placements)
    return DeployPlan(placements, dict(zip(names, capacity, strict=True)), containers)
