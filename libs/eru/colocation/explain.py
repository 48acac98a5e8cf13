"""Why an eviction decision chose its victims (docs/colocation.md "Every eviction explained"): `eru explain <id>`.

`explain_eviction(problem)` re-runs the recorded input of a decision (its `evict` problem) through the same pure
functions the eviction service ran (`parse_evict_problem`, `decide`, the policy's victim orders) and reports the
node's window (usage, satisfaction, watermarks) and, for every batch container of the newest sample, whether it was
chosen and why (or why not): its priority, satisfaction, the work an eviction throws away, its workload's budget
left and the node's back-off. Nothing is re-stated by hand: the same input gives the same explanation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eru.colocation.plan_kind import EvictProblem, answer, decide_problem, parse_evict_problem
from eru.colocation.policy import Decision, Sample, batch_ids, cpu_victim_order, memory_victim_order
from eru.colocation.window import cores

WATERMARKS = (
    "cpu_forbid",
    "cpu_suppress",
    "cpu_evict",
    "memory_forbid",
    "memory_evict",
    "satisfaction_lower",
    "satisfaction_upper",
    "batch_util_threshold",
    "memory_critical",
)
_CONDITION_TEXT = {
    "window_covered": "the window holds too few samples",
    "window_node_cpu_at_or_above_evict": "window node CPU {window_node_cpu_percent}% is below cpu_evict {cpu_evict}%",
    "window_satisfaction_below_lower": (
        "window satisfaction {window_satisfaction_percent}% is not below satisfaction_lower {satisfaction_lower}%"
    ),
    "window_batch_util_at_or_above_threshold": (
        "window batch utilisation {window_batch_util_percent}% is below batch_util_threshold {batch_util_threshold}%"
    ),
    "newest_satisfaction_below_lower": (
        "newest satisfaction {satisfaction_percent}% is not below satisfaction_lower {satisfaction_lower}%"
    ),
    "newest_batch_util_at_or_above_threshold": (
        "newest batch utilisation {batch_util_percent}% is below batch_util_threshold {batch_util_threshold}%"
    ),
}


def _num(value: Any) -> Any:
    return f"{value:g}" if isinstance(value, float) else value


def _why_no_cpu(explain: Mapping[str, Any], config: Mapping[str, Any]) -> str:
    cpu = explain.get("cpu") or {}
    if cpu.get("cooling_down"):
        return "the node is in its CPU cool-down after the last CPU eviction"
    values = {
        **{k: _num(v) for k, v in config.items()},
        **{k: _num(v) for k, v in (explain.get("newest") or {}).items()},
    }
    values.update({k: _num(v) for k, v in cpu.items() if not isinstance(v, dict)})
    failed = [name for name, held in (cpu.get("conditions") or {}).items() if not held]
    if failed:
        return str(_CONDITION_TEXT.get(failed[0], failed[0]).format_map(_Missing(values)))
    return "what is already being evicted covers the CPU release"


def _why_no_memory(explain: Mapping[str, Any], config: Mapping[str, Any]) -> str:
    memory = explain.get("memory") or {}
    if not memory.get("at_or_above_watermark"):
        percent = _num((explain.get("newest") or {}).get("node_memory_percent"))
        return f"node memory {percent}% is below memory_evict {config.get('memory_evict')}%"
    if memory.get("cooling_down"):
        return "the node is in its memory cool-down after the last memory eviction"
    return "what is already being evicted covers the memory release"


class _Missing(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "?"


def _backoff(parsed: EvictProblem) -> dict[str, Any]:
    """The node's cool-downs at the decision: seconds left of each (0 when not cooling down)."""
    config, now, state = parsed.config, parsed.now, parsed.state

    def left(last: float | None, cooldown: float) -> float:
        return 0.0 if last is None else round(max(0.0, last + cooldown - now), 3)

    return {
        "cpu_cooldown_left_seconds": left(state.last_cpu_eviction, config.cpu_cooldown_seconds),
        "memory_cooldown_left_seconds": left(state.last_memory_eviction, config.memory_cooldown_seconds),
    }


def _window(parsed: EvictProblem, decision: Decision) -> dict[str, Any]:
    explain = decision.explain
    stats = parsed.window.stats(parsed.now)
    config = parsed.config
    cpu = explain.get("cpu") or {}
    return {
        "node": parsed.node.name,
        "now": parsed.now,
        "capacity": {"cpu": cores(parsed.node.cpu), "memory": parsed.node.memory},
        "seconds": config.window_seconds,
        "samples": stats.count,
        "expected": stats.expected,
        "covered": stats.covered,
        "newest": explain.get("newest") or {},
        "window_node_cpu_percent": cpu.get("window_node_cpu_percent"),
        "window_satisfaction_percent": cpu.get("window_satisfaction_percent"),
        "window_batch_util_percent": cpu.get("window_batch_util_percent"),
        "cpu_conditions": cpu.get("conditions") or {},
        "watermarks": {name: getattr(config, name) for name in WATERMARKS},
        "backoff": _backoff(parsed),
    }


def _containers(parsed: EvictProblem, decision: Decision) -> list[dict[str, Any]]:
    newest = parsed.window.newest
    if newest is None or not isinstance(newest.payload, Sample):
        return []
    sample: Sample = newest.payload
    registry, config, state, now = parsed.registry, parsed.config, parsed.state, parsed.now
    explain = decision.explain
    config_dict = config.to_dict()
    ids = batch_ids(sample, registry)
    candidates = [c for c in ids if c not in state.pending]
    victims = {v.id: v for v in decision.victims}
    refused = {r.id: r for r in decision.refused}
    memory_taken = [v.id for v in decision.victims if v.reason == "memory"]
    cpu_order = cpu_victim_order(config, registry, [c for c in candidates if c not in memory_taken])
    memory_order = memory_victim_order(config, registry, sample, candidates)
    cpu_rank = {c: i + 1 for i, c in enumerate(cpu_order)}
    memory_rank = {c: i + 1 for i, c in enumerate(memory_order)}
    cpu_victims = [v.id for v in decision.victims if v.reason != "memory"]
    last_cpu = max((cpu_rank[c] for c in cpu_victims if c in cpu_rank), default=0)
    last_memory = max((memory_rank[c] for c in memory_taken if c in memory_rank), default=0)
    memory_on = bool(memory_taken) or "freed_bytes" in (explain.get("memory") or {})
    cpu_on = bool(cpu_victims) or "freed_cores" in (explain.get("cpu") or {})
    rows = []
    for cid in sorted(ids, key=lambda c: (cpu_rank.get(c, len(ids) + 1), c)):
        info = registry[cid]
        usage = sample.containers[cid]
        budget = state.budgets.get(info.workload)
        row: dict[str, Any] = {
            "id": cid,
            "workload": info.workload,
            "priority": info.priority,
            "cpu_request": cores(info.cpu_request),
            "cpu_used": cores(usage.cpu_used),
            "satisfaction_percent": round(100 * usage.cpu_used / info.cpu_request, 2) if info.cpu_request else None,
            "memory_used": usage.memory_used,
            "work_lost": info.work,
            "evictions": info.evictions,
            "budget_left": None if budget is None else budget.remaining(now),
            "cpu_rank": cpu_rank.get(cid),
            "memory_rank": memory_rank.get(cid),
            "chosen": cid in victims,
        }
        row["why"] = _why(
            cid,
            row,
            victims,
            refused,
            state.pending,
            explain,
            config_dict,
            (cpu_on, last_cpu),
            (memory_on, last_memory),
        )
        rows.append(row)
    return rows


def _why(
    cid: str,
    row: Mapping[str, Any],
    victims: Mapping[str, Any],
    refused: Mapping[str, Any],
    pending: frozenset[str],
    explain: Mapping[str, Any],
    config: Mapping[str, Any],
    cpu: tuple[bool, int],
    memory: tuple[bool, int],
) -> str:
    facts = f"priority {row['priority']}, request {row['cpu_request']:g} cores, work {row['work_lost']:g} CPU-s"
    if cid in pending:
        return "already commanded to go (pending eviction): neither chosen again nor counted twice"
    if cid in victims:
        victim = victims[cid]
        left = "" if victim.budget_left is None else f"; its workload's budget left after it: {victim.budget_left}"
        if victim.reason == "memory":
            return f"chosen for memory: rank {row['memory_rank']} in the memory order ({facts}){left}"
        release = (explain.get("cpu") or {}).get("release_cores")
        rank = row["cpu_rank"]
        return f"chosen for CPU satisfaction: rank {rank} in the CPU order ({facts}), release {release} cores{left}"
    if cid in refused:
        found = refused[cid]
        return f"kept by the eviction budget of {found.workload or 'its workload'} (rule {found.rule}): only suppressed"
    cpu_on, last_cpu = cpu
    memory_on, last_memory = memory
    if not cpu_on and not memory_on:
        return f"no eviction: {_why_no_cpu(explain, config)}; {_why_no_memory(explain, config)}"
    if row["budget_left"] == 0:
        return f"its workload {row['workload']} has no eviction budget left in the window"
    parts = []
    for on, last, rank, what in (
        (cpu_on, last_cpu, row["cpu_rank"], "CPU"),
        (memory_on, last_memory, row["memory_rank"], "memory"),
    ):
        if not on or rank is None:
            continue
        if rank > last:
            parts.append(f"not needed for {what}: the containers before it in the order (rank {rank}) free enough")
        else:
            parts.append(f"spared for {what}: the later victims cover the release without it (rank {rank})")
    return "; ".join(parts) + f" ({facts})" if parts else f"not a candidate ({facts})"


def explain_eviction(problem: Mapping[str, Any]) -> dict[str, Any]:
    """The explanation of one recorded eviction decision from its input (`evict` problem); `InvalidInput` naming the
    field when the input is broken. Keys: `action`, `window`, `containers` (batch containers of the newest sample,
    in the CPU victim order), `evict`, `refused` (the victims as `eru plan` answers them)."""
    parsed = parse_evict_problem(problem)
    decision = decide_problem(parsed)
    solved = answer(decision)
    return {
        "action": decision.explain.get("action", ""),
        "window": _window(parsed, decision),
        "containers": _containers(parsed, decision),
        "evict": solved["evict"],
        "refused": solved.get("refused", []),
        "suppress": solved["suppress"],
        "forbid_schedule": solved["forbid_schedule"],
        "budgets": (decision.explain.get("budget") or {}).get("workloads")
        or {name: b.to_dict(parsed.now) for name, b in sorted(parsed.state.budgets.items())},
    }
