"""What the tracker adds to each decision's input for budgets and progress-aware victims (pure).

* work — each batch container's CPU-seconds done, summed from the samples (cpu used × the time since the node's
  previous sample, at most two metrics intervals so a gap is not counted as work);
* budgets — for every batch workload on the node, its eviction budget (the workload's own settings over the pod's),
  its desired count and the evictions so far (the shared history the service keeps across replicas).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from eru.colocation.budget import WorkloadBudget, parse_budget
from eru.colocation.config import ColocationConfig, pod_budget
from eru.colocation.policy import BATCH, ContainerInfo, Usage
from eru.colocation.window import MICRO
from eru.domain.messages import ContainerMetrics
from eru.errors import InvalidInput


def add_work(
    work: dict[str, float],
    usages: Mapping[str, Usage],
    infos: Mapping[str, ContainerInfo],
    elapsed: float,
) -> None:
    """Add `elapsed` seconds of each batch container's usage to `work` (CPU-seconds) and forget departed ones."""
    for cid, usage in usages.items():
        info = infos.get(cid)
        if info is not None and info.priority_class == BATCH:
            work[cid] = work.get(cid, 0.0) + usage.cpu_used / MICRO * elapsed
    for cid in [cid for cid in work if cid not in usages]:
        del work[cid]


def with_work(registry: Mapping[str, ContainerInfo], work: Mapping[str, float]) -> dict[str, ContainerInfo]:
    """The registry with each batch container's work so far (what the victim order and the record read)."""
    return {cid: _with(info, round(work[cid], 3)) if cid in work else info for cid, info in registry.items()}


def _with(info: ContainerInfo, done: float) -> ContainerInfo:
    """`info` with `work=done`, built directly: `dataclasses.replace` walks the fields each time (a third of the
    tracker's time at 50 containers a node)."""
    if info.work == done:
        return info
    return ContainerInfo(
        info.id,
        info.priority_class,
        info.priority,
        info.cpu_request,
        info.memory_request,
        info.cpu_limit,
        info.memory_limit,
        info.workload,
        done,
        info.evictions,
        info.cpu_cores,
    )


def workload_budgets(
    config: ColocationConfig,
    containers: Sequence[ContainerMetrics],
    history: Mapping[str, Iterable[float]],
) -> dict[str, WorkloadBudget]:
    """The budgets of the batch workloads on the node: the workload's own settings over the node's configuration;
    a workload whose recorded settings do not parse falls back to the configuration's (the allocator refuses such
    deploys; an old container must not stop the node's decisions). Containers without a workload have no budget."""
    base = pod_budget(config)
    found: dict[str, WorkloadBudget] = {}
    for c in containers:
        if c.priority_class != BATCH or not c.workload:
            continue
        try:
            budget = parse_budget(c.budget or None, "budget", base)
        except InvalidInput:
            budget = base
        known = found.get(c.workload)
        desired = max(c.desired, known.desired if known else 0, 1)
        times = tuple(sorted(history.get(c.workload, ())))
        found[c.workload] = WorkloadBudget(c.workload, budget, desired, times)
    return found
