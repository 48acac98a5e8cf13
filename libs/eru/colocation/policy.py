"""One node's colocation decision (docs/colocation.md): forbid-schedule, CPU suppression, CPU and memory eviction.

`decide` is pure: it reads the configuration, the node, `now`, the node's remembered state, the window's sums and
the newest sample, and returns what should hold now plus the numbers behind every condition (`explain`). CPU is in
integer micro-cores and memory in bytes, and every watermark test is an exact integer comparison, so a value on a
boundary always lands on the same side (docs/colocation.md: "at or above" the watermark, "below" the satisfaction
bound).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from eru.colocation.budget import Refusal, WorkloadBudget, take
from eru.colocation.config import ColocationConfig
from eru.colocation.quota import cpu_cap
from eru.colocation.window import WindowPoint, WindowStats, cores

BATCH = "batch"


@dataclass(frozen=True, slots=True)
class ContainerInfo:
    """What the policy knows of a container: class, priority and requests (CPU in micro-cores)."""

    id: str
    priority_class: str
    priority: int
    cpu_request: int
    memory_request: int
    cpu_limit: int = 0
    memory_limit: int = 0
    workload: str = ""
    work: float = 0.0  # CPU-seconds done so far (what an eviction throws away)
    evictions: int = 0  # times this instance (its lineage) was evicted before
    cpu_cores: int = 0  # cores of its cpuset when CPU-bound (0: not bound); bounds what suppression may give it


@dataclass(frozen=True, slots=True)
class Usage:
    """A container's usage in one sample."""

    cpu_used: int
    memory_used: int


@dataclass(frozen=True, slots=True)
class Sample:
    """One metrics sample of a node; `batch_cpu_allowed` is the suppression in force (None: not suppressed)."""

    time: float
    node_cpu_used: int
    node_memory_used: int
    batch_cpu_allowed: int | None
    containers: Mapping[str, Usage]


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A node's capacity: CPU in micro-cores, memory in bytes."""

    name: str
    cpu: int
    memory: int


@dataclass(frozen=True, slots=True)
class NodeState:
    """What the previous decisions left behind on a node."""

    last_cpu_eviction: float | None = None
    last_memory_eviction: float | None = None
    forbid_cpu: bool = False
    forbid_memory: bool = False
    pending: frozenset[str] = frozenset()
    budgets: Mapping[str, WorkloadBudget] = field(default_factory=dict)  # workload → its eviction budget
    suppress_changed: float | None = None  # when the batch allowance last changed (cut, raise, start or lift)


@dataclass(frozen=True, slots=True)
class Victim:
    """A container to evict; `release` is micro-cores of request (cpu) or bytes of usage (memory)."""

    id: str
    reason: str
    release: int
    workload: str = ""
    evictions: int = 0
    budget_left: int | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """What should hold on the node now."""

    forbid_cpu: bool
    forbid_memory: bool
    batch_cpu_allowed: int | None
    victims: tuple[Victim, ...]
    explain: dict[str, Any] = field(default_factory=dict)
    refused: tuple[Refusal, ...] = ()  # victims an eviction budget kept (the node is only suppressed for them)
    fresh: bool = True  # False when there was no sample, or the newest was stale: nothing was decided


def batch_ids(sample: Sample, registry: Mapping[str, ContainerInfo]) -> list[str]:
    """Batch containers of the sample that the registry knows (unknown ones are never acted on)."""
    return [cid for cid in sample.containers if (info := registry.get(cid)) and info.priority_class == BATCH]


def window_point(sample: Sample, registry: Mapping[str, ContainerInfo], node: NodeSpec) -> WindowPoint:
    """Reduce a sample to the window's figures; unsuppressed batch is allowed all CPU the others leave idle."""
    ids = batch_ids(sample, registry)
    used = sum(sample.containers[cid].cpu_used for cid in ids)
    request = sum(registry[cid].cpu_request for cid in ids)
    allowed = sample.batch_cpu_allowed
    if allowed is None:
        allowed = max(0, node.cpu - max(0, sample.node_cpu_used - used))
    return WindowPoint(sample.time, sample.node_cpu_used, used, request, allowed, sample)


def _pct(part: int, whole: int) -> float | None:
    return round(100 * part / whole, 4) if whole else None


def choose_victims(candidates: Sequence[tuple[str, int]], need: int) -> tuple[list[tuple[str, int]], int]:
    """Victims in the given preference order until `need` is freed, then spare any victim the others cover.

    The last victim taken is always needed; earlier ones are dropped (latest first) when the rest still reach `need`,
    so a small low-priority container is not evicted beside a big one that frees enough alone. Returns the victims
    and what they free; when even all candidates fall short, all are taken.
    """
    chosen: list[tuple[str, int]] = []
    total = 0
    for candidate in candidates:
        if total >= need:
            break
        chosen.append(candidate)
        total += candidate[1]
    if total >= need and len(chosen) > 1:
        for candidate in reversed(chosen[:-1]):
            if total - candidate[1] >= need:
                chosen.remove(candidate)
                total -= candidate[1]
    return chosen, total


def _work(config: ColocationConfig, info: ContainerInfo) -> float:
    """Progress-aware tie-break among equal candidates: least work done first (0 when the option is off)."""
    return info.work if config.prefer_least_work else 0.0


def cpu_victim_order(
    config: ColocationConfig, registry: Mapping[str, ContainerInfo], candidates: Sequence[str]
) -> list[str]:
    """CPU victims in preference order: lowest priority, then larger request, then least work done, then id."""
    return sorted(
        candidates, key=lambda c: (registry[c].priority, -registry[c].cpu_request, _work(config, registry[c]), c)
    )


def memory_victim_order(
    config: ColocationConfig, registry: Mapping[str, ContainerInfo], sample: Sample, candidates: Sequence[str]
) -> list[str]:
    """Memory victims in preference order: lowest priority, then largest memory usage, then least work, then id."""
    return sorted(
        candidates,
        key=lambda c: (registry[c].priority, -sample.containers[c].memory_used, _work(config, registry[c]), c),
    )


def _forbid(used: int, capacity: int, watermark: int, hysteresis: int, was: bool) -> bool:
    line = max(0, watermark - hysteresis) if was else watermark
    return used * 100 >= line * capacity


def batch_caps(sample: Sample, registry: Mapping[str, ContainerInfo], node: NodeSpec, pending: frozenset[str]) -> int:
    """Σ of what the batch containers staying on the node could use unsuppressed (`quota.cpu_cap`)."""
    return sum(
        cpu_cap(registry[cid].cpu_limit, registry[cid].cpu_cores, node.cpu)
        for cid in batch_ids(sample, registry)
        if cid not in pending
    )


def _suppress(
    config: ColocationConfig,
    node: NodeSpec,
    now: float,
    state: NodeState,
    point: WindowPoint,
    registry: Mapping[str, ContainerInfo],
) -> tuple[int | None, dict[str, Any]]:
    """The batch allowance (docs/colocation.md "Suppression"): cut at once when the target falls below the band,
    raised by a step (or lifted) only after the dwell and when the target is above the band."""
    sample: Sample = point.payload
    previous = sample.batch_cpu_allowed
    non_batch = max(0, sample.node_cpu_used - point.batch_used)
    target = max(0, node.cpu * config.cpu_suppress // 100 - non_batch)
    step = node.cpu * config.suppress_step_percent // 100
    band = node.cpu * config.suppress_hysteresis // 100
    above = min(100, config.cpu_suppress + config.suppress_hysteresis)  # the node over this: cut, however small
    caps = batch_caps(sample, registry, node, state.pending)
    dwelt = state.suppress_changed is None or now - state.suppress_changed >= config.suppress_dwell_seconds
    explain: dict[str, Any] = {
        "target": cores(target),
        "previous": None if previous is None else cores(previous),
        "band": cores(band),
        "batch_limits": cores(caps),
        "dwell_over": dwelt,
    }
    allowed: int | None
    if point.batch_request == 0 and point.batch_used == 0:
        allowed, explain["why"] = None, "no batch containers"
    elif previous is None:
        if sample.node_cpu_used * 100 < config.cpu_suppress * node.cpu:
            allowed, explain["why"] = None, "node CPU below the suppress watermark"
        elif target >= caps:
            allowed, explain["why"] = None, "the target covers every batch container's own limit: nothing to cut"
        else:
            allowed, explain["why"] = target, "node CPU at or above the suppress watermark: cut at once"
    elif target + band < previous or (target < previous and sample.node_cpu_used >= node.cpu * above // 100):
        # the target fell out of the band, or the node is above the band over the suppress line: cut at once
        allowed, explain["why"] = target, "lower at once"
    elif not dwelt:
        allowed, explain["why"] = previous, "unchanged: within the dwell after the last change"
    elif target >= caps:
        allowed, explain["why"] = None, "the target covers every batch container's own limit: suppression lifted"
    elif point.batch_used + band <= min(previous, caps):
        allowed, explain["why"] = None, "batch uses well below its allowance: suppression lifted"
    elif target > previous + band:
        allowed = min(target, previous + step)
        if allowed >= caps:
            allowed, explain["why"] = None, "raised up to every batch container's own limit: suppression lifted"
        else:
            explain["why"] = "raised by a step"
    else:
        allowed, explain["why"] = previous, "unchanged: the target is within the band"
    return allowed, explain


def decide(
    config: ColocationConfig,
    node: NodeSpec,
    now: float,
    state: NodeState,
    stats: WindowStats,
    newest: WindowPoint | None,
    registry: Mapping[str, ContainerInfo],
) -> Decision:
    """The node's forbid-schedule flags, batch CPU allowance and victims at `now` (docs/colocation.md)."""
    explain: dict[str, Any] = {"now": now, "window": {"samples": stats.count, "expected": stats.expected}}
    if newest is None or not isinstance(newest.payload, Sample):
        explain["action"] = "none: no samples"
        return Decision(state.forbid_cpu, state.forbid_memory, None, (), explain, fresh=False)
    sample: Sample = newest.payload
    age = now - sample.time
    stale = age > 2 * config.metrics_interval_seconds
    newest_explain = {
        "time": sample.time,
        "age_seconds": round(age, 6),
        "node_cpu_percent": _pct(sample.node_cpu_used, node.cpu),
        "node_memory_percent": _pct(sample.node_memory_used, node.memory),
        "batch_cpu_used": cores(newest.batch_used),
        "batch_cpu_request": cores(newest.batch_request),
        "batch_cpu_allowed": cores(newest.batch_allowed),
        "satisfaction_percent": _pct(newest.batch_used, newest.batch_request),
        "batch_util_percent": _pct(newest.batch_used, newest.batch_allowed),
    }
    explain["newest"] = newest_explain
    if stale:
        explain["action"] = f"none: newest sample is {age:.3f}s old (> 2 metrics intervals)"
        return Decision(state.forbid_cpu, state.forbid_memory, sample.batch_cpu_allowed, (), explain, fresh=False)

    hysteresis = config.forbid_hysteresis
    forbid_cpu = _forbid(sample.node_cpu_used, node.cpu, config.cpu_forbid, hysteresis, state.forbid_cpu)
    forbid_memory = _forbid(sample.node_memory_used, node.memory, config.memory_forbid, hysteresis, state.forbid_memory)
    allowed, explain["suppress"] = _suppress(config, node, now, state, newest, registry)

    candidates = [cid for cid in batch_ids(sample, registry) if cid not in state.pending]
    victims = _victims(config, node, now, state, stats, newest, registry, candidates, explain)
    refused: list[Refusal] = []
    if victims and state.budgets:
        victims, refused = _budgeted(config, node, now, state, stats, newest, registry, candidates, victims, explain)
    if refused:
        explain["action"] = (f"evict {len(victims)}, " if victims else "") + (
            f"{len(refused)} kept by the eviction budget: the node is only suppressed for them"
        )
    else:
        explain["action"] = f"evict {len(victims)}" if victims else "no eviction"
    return Decision(forbid_cpu, forbid_memory, allowed, tuple(victims), explain, tuple(refused))


def _victims(
    config: ColocationConfig,
    node: NodeSpec,
    now: float,
    state: NodeState,
    stats: WindowStats,
    newest: WindowPoint,
    registry: Mapping[str, ContainerInfo],
    candidates: Sequence[str],
    explain: dict[str, Any],
) -> list[Victim]:
    sample: Sample = newest.payload
    memory_victims, explain["memory"] = _memory_eviction(config, node, now, state, sample, registry, candidates)
    taken = {v.id for v in memory_victims}
    cpu_victims, explain["cpu"] = _cpu_eviction(
        config, node, now, state, stats, newest, registry, [c for c in candidates if c not in taken], taken
    )
    return memory_victims + cpu_victims


def _budgeted(
    config: ColocationConfig,
    node: NodeSpec,
    now: float,
    state: NodeState,
    stats: WindowStats,
    newest: WindowPoint,
    registry: Mapping[str, ContainerInfo],
    candidates: Sequence[str],
    victims: list[Victim],
    explain: dict[str, Any],
) -> tuple[list[Victim], list[Refusal]]:
    """The victims the workloads' eviction budgets admit (docs/colocation.md "Eviction budgets").

    When some are refused, the choice is made again among the candidates whose workloads still have budget, and
    capped per workload; a memory victim goes ahead without budget when the node is at `memory_critical`."""
    sample: Sample = newest.payload
    budgets = state.budgets
    critical = sample.node_memory_used * 100 >= config.memory_critical * node.memory
    rows = [(v.id, registry[v.id].workload, v.reason) for v in victims]
    admitted, refused, _ = take(rows, budgets, now, critical=critical)
    if refused:
        spent = {name for name, budget in budgets.items() if budget.remaining(now) <= 0}
        eligible = [c for c in candidates if registry[c].workload not in spent]
        victims = _victims(config, node, now, state, stats, newest, registry, eligible, {})
        rows = [(v.id, registry[v.id].workload, v.reason) for v in victims]
        admitted, second, _ = take(rows, budgets, now, critical=critical)
        first = {r.id for r in refused}
        refused = [r for r in refused if r.id not in admitted] + [r for r in second if r.id not in first]
    left = {name: budget.remaining(now) for name, budget in budgets.items()}
    kept: list[Victim] = []
    for victim in victims:
        if victim.id not in admitted:
            continue
        workload = registry[victim.id].workload
        if workload in left:
            left[workload] = max(0, left[workload] - 1)
        kept.append(replace(victim, budget_left=left.get(workload)))
    rule = "out-of-memory" if critical and any(v.reason == "memory" for v in kept) else "budget"
    explain["budget"] = {
        "workloads": {name: budget.to_dict(now) for name, budget in sorted(budgets.items())},
        "left_after": left,
        "refused": [{"id": r.id, "workload": r.workload, "reason": r.reason, "rule": r.rule} for r in refused],
        "memory_critical": critical,
        "rule": rule,
    }
    return kept, refused


def _memory_eviction(
    config: ColocationConfig,
    node: NodeSpec,
    now: float,
    state: NodeState,
    sample: Sample,
    registry: Mapping[str, ContainerInfo],
    candidates: Sequence[str],
) -> tuple[list[Victim], dict[str, Any]]:
    used = sample.node_memory_used
    over = used * 100 >= config.memory_evict * node.memory
    cooling = (
        state.last_memory_eviction is not None and now - state.last_memory_eviction < config.memory_cooldown_seconds
    )
    line = node.memory * max(0, config.memory_evict - 2) // 100
    pending = sum(sample.containers[c].memory_used for c in state.pending if c in sample.containers)
    need = max(0, used - line - pending)
    explain: dict[str, Any] = {
        "at_or_above_watermark": over,
        "cooling_down": cooling,
        "release_bytes": max(0, used - line),
        "pending_release_bytes": pending,
    }
    if not over or cooling or need == 0:
        return [], explain
    order = memory_victim_order(config, registry, sample, candidates)
    chosen, freed = choose_victims([(c, sample.containers[c].memory_used) for c in order], need)
    explain["freed_bytes"] = freed
    return [_victim(registry[c], "memory", amount) for c, amount in chosen], explain


def _cpu_eviction(
    config: ColocationConfig,
    node: NodeSpec,
    now: float,
    state: NodeState,
    stats: WindowStats,
    newest: WindowPoint,
    registry: Mapping[str, ContainerInfo],
    candidates: Sequence[str],
    taken: set[str],
) -> tuple[list[Victim], dict[str, Any]]:
    lower, threshold = config.satisfaction_lower, config.batch_util_threshold
    conditions = {
        "window_covered": stats.covered,
        "window_node_cpu_at_or_above_evict": stats.count > 0
        and stats.node_cpu * 100 >= config.cpu_evict * stats.count * node.cpu,
        "window_satisfaction_below_lower": stats.batch_used * 100 < lower * stats.batch_request,
        "window_batch_util_at_or_above_threshold": stats.batch_used * 100 >= threshold * stats.batch_allowed,
        "newest_satisfaction_below_lower": newest.batch_used * 100 < lower * newest.batch_request,
        "newest_batch_util_at_or_above_threshold": newest.batch_used * 100 >= threshold * newest.batch_allowed,
    }
    cooling = state.last_cpu_eviction is not None and now - state.last_cpu_eviction < config.cpu_cooldown_seconds
    explain: dict[str, Any] = {
        "conditions": conditions,
        "cooling_down": cooling,
        "window_node_cpu_percent": _pct(stats.node_cpu, stats.count * node.cpu),
        "window_satisfaction_percent": _pct(stats.batch_used, stats.batch_request),
        "window_batch_util_percent": _pct(stats.batch_used, stats.batch_allowed),
    }
    if cooling or not all(conditions.values()):
        return [], explain
    release = newest.batch_request - newest.batch_allowed * 100 // config.satisfaction_upper
    sample: Sample = newest.payload
    already = sum(registry[c].cpu_request for c in (state.pending | taken) if c in sample.containers and c in registry)
    need = max(0, release - already)
    explain["release_cores"] = cores(release)
    explain["pending_release_cores"] = cores(already)
    if need == 0:
        return [], explain
    order = cpu_victim_order(config, registry, candidates)
    chosen, freed = choose_victims([(c, registry[c].cpu_request) for c in order], need)
    explain["freed_cores"] = cores(freed)
    return [_victim(registry[c], "cpu-satisfaction", amount) for c, amount in chosen], explain


def _victim(info: ContainerInfo, reason: str, release: int) -> Victim:
    return Victim(info.id, reason, release, info.workload, info.evictions)
