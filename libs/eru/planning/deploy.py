"""`plan_deploy`: every node's capacity, the placement mode's counts, and concrete plans for the placed instances."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from eru.planning.decide import decide
from eru.planning.plan import Rejection
from eru.planning.request import NormalizedRequest, PlanningConfig
from eru.planning.resources import ContainerPlan, NodeResources
from eru.planning.snapshot import ClusterSnapshot, DeployAsk


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
    """Plan `count` new instances (for `each`/`fill`, the per-node number) of `request` over `nodes` with `mode`:
    `eru.planning.decide` over a snapshot of `nodes` (the simulator's and the benchmarks' entry point).

    Raises `PlanningFailure` with the numbers when the mode cannot place them, `InvalidInput` for malformed input.
    """
    snapshot = ClusterSnapshot(config=config, nodes=tuple(nodes), counts={"": dict(counts or {})})
    outcome = decide(snapshot, DeployAsk(request, mode, count, nodes_limit, options or {}))
    if isinstance(outcome, Rejection):
        raise outcome.failure
    return DeployPlan(dict(outcome.placements), dict(outcome.capacities), list(outcome.containers))
