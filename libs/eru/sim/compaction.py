"""Experiment (c), cell compaction (the Borg paper's compaction metric, Verma et al., EuroSys 2015; docs/cli.md `eru
sim`): the smallest number of identical nodes that runs a workload with at most 0.2% of its tasks left pending, per
placement mode; 11 random seeds, the 90th percentile reported.

Each job of the workload is one deploy request through the planning core (`plan_deploy`: exact per-node capacity
from docs/planning.md, the placement mode, concrete plans), charged to the nodes before the next job, prod jobs first. A
job that does not fit whole is placed as far as the nodes' total capacity allows and the rest is pending (an operator
would resubmit a smaller count). Seeds shuffle the arrival order of jobs within each class (the workload itself is
fixed by its own seed), as Borg's trials vary their random choices.

The search assumes more nodes never leave more pending: from a lower bound (total memory or bound CPU over one
node's) it doubles until the workload fits, then bisects. `each` and `fill` are not compared: their count is per
node, not a number of tasks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from eru.errors import PlanningFailure
from eru.planning import (
    ContainerPlan,
    NodeResources,
    NormalizedRequest,
    PlanningConfig,
    charge,
    node_capacities,
    normalize_request,
    plan_deploy,
)
from eru.planning.scorers.from_resources import resource_score_options
from eru.sim.workload import GIB, Job

PENDING_ALLOWED = 0.002
TRIAL_SEEDS = 11

MODES: Mapping[str, tuple[str, Mapping[str, float] | None]] = {
    "auto": ("auto", None),
    "global": ("global", None),
    "drained": ("drained", None),
    "score least-allocated": ("score", {"least-allocated": 1}),
    "score most-allocated": ("score", {"most-allocated": 1}),
    "score balanced+least": ("score", {"least-allocated": 1, "balanced-allocation": 1}),
}


@dataclass(frozen=True, slots=True)
class NodeShape:
    """The identical nodes of the cell."""

    cores: int = 32
    memory: int = 128 * GIB

    def node(self, index: int, share_base: int) -> NodeResources:
        """Node number `index`, idle."""
        return NodeResources(f"n{index:05d}", {str(core): share_base for core in range(self.cores)}, self.memory)


@dataclass(frozen=True, slots=True)
class ModeResult:
    """Per seed the smallest fitting node count, and the nearest-rank 90th percentile of them."""

    mode: str
    nodes: list[int]

    @property
    def p90(self) -> int:
        """Nearest-rank 90th percentile (with 11 seeds: the 10th smallest)."""
        ranked = sorted(self.nodes)
        return ranked[max(0, math.ceil(0.9 * len(ranked)) - 1)]


def pending_tasks(
    jobs: Sequence[Job],
    requests: Sequence[NormalizedRequest],
    count: int,
    shape: NodeShape,
    mode: str,
    scorers: Mapping[str, float] | None,
    config: PlanningConfig,
) -> int:
    """Tasks left pending when `jobs` are deployed in order on `count` nodes of `shape` with `mode`."""
    nodes = [shape.node(index, config.share_base) for index in range(count)]
    pending = 0
    for job, request in zip(jobs, requests, strict=True):
        options = None if scorers is None else resource_score_options(nodes, request, scorers=scorers)
        placed = job.tasks
        try:
            plan = plan_deploy(nodes, request, config, mode=mode, count=placed, options=options)
        except PlanningFailure:
            placed = min(job.tasks, sum(node_capacities(nodes, request, config).values()))
            if placed == 0:
                pending += job.tasks
                continue
            plan = plan_deploy(nodes, request, config, mode=mode, count=placed, options=options)
        pending += job.tasks - placed
        nodes = _charged(nodes, plan.containers)
    return pending


def _charged(nodes: list[NodeResources], containers: Sequence[ContainerPlan]) -> list[NodeResources]:
    by_node: dict[str, list[ContainerPlan]] = {}
    for container in containers:
        by_node.setdefault(container.node, []).append(container)
    return [charge(node, by_node[node.name]) if node.name in by_node else node for node in nodes]


def lower_bound(jobs: Sequence[Job], shape: NodeShape) -> int:
    """No fewer nodes can hold the workload's memory or its bound cores."""
    memory = sum(job.memory * job.tasks for job in jobs)
    bound = sum(job.cpu * job.tasks for job in jobs if job.cpu_bind)
    return max(1, math.ceil(memory / shape.memory), math.ceil(bound / shape.cores))


def smallest_cell(
    jobs: Sequence[Job], shape: NodeShape, mode: str, scorers: Mapping[str, float] | None, config: PlanningConfig
) -> int:
    """The fewest nodes leaving at most 0.2% of the tasks pending."""
    requests = [normalize_request(job.request(), config, f"jobs.{job.name}") for job in jobs]
    allowed = math.floor(PENDING_ALLOWED * sum(job.tasks for job in jobs))

    def fits(count: int) -> bool:
        return pending_tasks(jobs, requests, count, shape, mode, scorers, config) <= allowed

    low = lower_bound(jobs, shape)
    if fits(low):
        return low
    high = low
    while True:
        low, high = high, math.ceil(high * 1.25) + 1
        if fits(high):
            break
    # fits(low) is False, fits(high) is True.
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            high = middle
        else:
            low = middle
    return high


def shuffled(jobs: Sequence[Job], seed: int) -> list[Job]:
    """Jobs with their order shuffled within each class, prod first."""
    rng = np.random.default_rng(seed)
    result: list[Job] = []
    for klass in ("prod", "batch"):
        group = [job for job in jobs if job.klass == klass]
        result.extend(group[i] for i in rng.permutation(len(group)))
    return result


def compaction_experiment(
    jobs: Sequence[Job],
    *,
    shape: NodeShape | None = None,
    modes: Sequence[str] | None = None,
    seeds: int = TRIAL_SEEDS,
    config: PlanningConfig | None = None,
    progress: Callable[[str, int], Any] | None = None,
) -> list[ModeResult]:
    """For every mode, the smallest cell per seed; `progress(mode, seed)` is called after each search."""
    shape = shape or NodeShape()
    config = config or PlanningConfig()
    results = []
    for name in modes or list(MODES):
        mode, scorers = MODES[name]
        counts = []
        for seed in range(seeds):
            counts.append(smallest_cell(shuffled(jobs, seed), shape, mode, scorers, config))
            if progress is not None:
                progress(name, seed)
        results.append(ModeResult(name, counts))
    return results
