"""`eru plan` kind `evict` (docs/planning.md): one node's colocation decision from a JSON problem, and the problem back.

`solve_evict` is what `eru plan` runs; the eviction service records every decision's input with `evict_problem`, in
exactly this schema, so `eru plan` on a recorded event reproduces the decision.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from eru.colocation.budget import budget_from_dict
from eru.colocation.config import ColocationConfig, parse_config
from eru.colocation.policy import ContainerInfo, Decision, NodeSpec, NodeState, Sample, Usage, decide, window_point
from eru.colocation.window import SlidingWindow, WindowPoint, cores, micro
from eru.errors import InvalidInput
from eru.units import parse_bytes

CLASSES = ("prod", "mid", "batch")


MAX_NUMBER = 1e15


def _number(value: object, field: str, *, minimum: float | None = 0.0, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(field, f"expected a number, got {value!r}")
    if isinstance(value, int) and abs(value) > MAX_NUMBER:
        raise InvalidInput(field, f"must be within ±{MAX_NUMBER:g}, got {value}")
    number = float(value)
    if number != number or number in (float("inf"), float("-inf")):
        raise InvalidInput(field, f"expected a finite number, got {value!r}")
    if abs(number) > MAX_NUMBER:
        # beyond any real machine, and micro-core sums of such numbers would overflow to infinity
        raise InvalidInput(field, f"must be within ±{MAX_NUMBER:g}, got {value!r}")
    if positive and number <= 0:
        raise InvalidInput(field, f"must be greater than 0, got {value!r}")
    if minimum is not None and number < minimum:
        raise InvalidInput(field, f"must not be below {minimum:g}, got {value!r}")
    return number


def _bytes(value: object, field: str) -> int:
    amount = parse_bytes(value, field)
    if amount < 0:
        raise InvalidInput(field, f"must not be negative, got {value!r}")
    return amount


def _mapping(value: object, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidInput(field, f"expected an object, got {type(value).__name__}")
    return value


def _list(value: object, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidInput(field, f"expected a list, got {type(value).__name__}")
    return value


def _text(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(field, f"expected a string, got {value!r}")
    return value


def _optional_time(problem: Mapping[str, Any], key: str) -> float | None:
    value = problem.get(key)
    return None if value is None else _number(value, key, minimum=None)


def parse_node(raw: object, field: str = "node") -> NodeSpec:
    """`{"name", "cpu" (cores), "memory" (bytes or human string)}`."""
    node = _mapping(raw, field)
    name = node.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"{field}.name", f"expected a non-empty string, got {name!r}")
    cpu = micro(_number(node.get("cpu"), f"{field}.cpu", positive=True))
    memory = _bytes(node.get("memory"), f"{field}.memory")
    if memory <= 0:
        raise InvalidInput(f"{field}.memory", f"must be greater than 0, got {node.get('memory')!r}")
    return NodeSpec(name, cpu, memory)


def parse_containers(raw: object, field: str = "containers") -> dict[str, ContainerInfo]:
    """The container registry: `[{"id", "class", "priority", "cpu_request", "memory_request"}]`, ids unique."""
    registry: dict[str, ContainerInfo] = {}
    for index, item in enumerate(_list(raw, field)):
        where = f"{field}[{index}]"
        entry = _mapping(item, where)
        cid = entry.get("id")
        if not isinstance(cid, str) or not cid:
            raise InvalidInput(f"{where}.id", f"expected a non-empty string, got {cid!r}")
        if cid in registry:
            raise InvalidInput(f"{where}.id", f"duplicate container id {cid!r}")
        klass = entry.get("class")
        if klass not in CLASSES:
            raise InvalidInput(f"{where}.class", f"expected one of {', '.join(CLASSES)}, got {klass!r}")
        priority = entry.get("priority", 0)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise InvalidInput(f"{where}.priority", f"expected an integer, got {priority!r}")
        registry[cid] = ContainerInfo(
            id=cid,
            priority_class=str(klass),
            priority=priority,
            cpu_request=micro(_number(entry.get("cpu_request", 0), f"{where}.cpu_request")),
            memory_request=_bytes(entry.get("memory_request", 0), f"{where}.memory_request"),
            cpu_limit=micro(_number(entry.get("cpu_limit", 0), f"{where}.cpu_limit")),
            memory_limit=_bytes(entry.get("memory_limit", 0), f"{where}.memory_limit"),
            workload=_text(entry.get("workload", ""), f"{where}.workload"),
            work=_number(entry.get("work", 0), f"{where}.work"),
            evictions=int(_number(entry.get("evictions", 0), f"{where}.evictions")),
            cpu_cores=int(_number(entry.get("cpu_cores", 0), f"{where}.cpu_cores")),
        )
    return registry


def parse_sample(raw: object, field: str) -> Sample:
    """One sample: `{"time", "node_cpu_used", "node_memory_used", "batch_cpu_allowed", "containers"}`."""
    entry = _mapping(raw, field)
    allowed = entry.get("batch_cpu_allowed")
    usages: dict[str, Usage] = {}
    for cid, usage in _mapping(entry.get("containers", {}), f"{field}.containers").items():
        where = f"{field}.containers.{cid}"
        values = _mapping(usage, where)
        usages[str(cid)] = Usage(
            micro(_number(values.get("cpu_used", 0), f"{where}.cpu_used")),
            _bytes(values.get("memory_used", 0), f"{where}.memory_used"),
        )
    return Sample(
        time=_number(entry.get("time"), f"{field}.time", minimum=None),
        node_cpu_used=micro(_number(entry.get("node_cpu_used"), f"{field}.node_cpu_used")),
        node_memory_used=_bytes(entry.get("node_memory_used"), f"{field}.node_memory_used"),
        batch_cpu_allowed=None if allowed is None else micro(_number(allowed, f"{field}.batch_cpu_allowed")),
        containers=usages,
    )


def build_window(
    config: ColocationConfig, node: NodeSpec, registry: Mapping[str, ContainerInfo], samples: Iterable[Sample]
) -> SlidingWindow:
    """The window the service would hold after receiving `samples` in this order."""
    window = SlidingWindow(config.window_seconds, config.metrics_interval_seconds)
    for sample in samples:
        window.add(window_point(sample, registry, node))
    return window


def answer(decision: Decision) -> dict[str, Any]:
    """A decision as JSON in the schema of docs/planning.md."""
    return {
        "forbid_schedule": {"cpu": decision.forbid_cpu, "memory": decision.forbid_memory},
        "suppress": None
        if decision.batch_cpu_allowed is None
        else {"batch_cpu_allowed": cores(decision.batch_cpu_allowed)},
        "evict": [
            {
                "id": v.id,
                "reason": v.reason,
                "release": cores(v.release) if v.reason != "memory" else v.release,
                **({"workload": v.workload, "evictions": v.evictions} if v.workload else {}),
                **({"budget_left": v.budget_left} if v.budget_left is not None else {}),
            }
            for v in decision.victims
        ],
        **(
            {
                "refused": [
                    {"id": r.id, "workload": r.workload, "reason": r.reason, "rule": r.rule} for r in decision.refused
                ]
            }
            if decision.refused
            else {}
        ),
        "explain": decision.explain,
    }


@dataclass(frozen=True, slots=True)
class EvictProblem:
    """A parsed `evict` problem: everything `decide` reads (the window already built from the samples)."""

    config: ColocationConfig
    node: NodeSpec
    now: float
    state: NodeState
    registry: dict[str, ContainerInfo]
    window: SlidingWindow


def parse_evict_problem(problem: Mapping[str, Any]) -> EvictProblem:
    """An `evict` problem (docs/planning.md) parsed and checked; `InvalidInput` naming the field.

    Optional beyond the schema in docs/planning.md: `forbid_schedule` {cpu, memory} (the previous flags, for the
    hysteresis), `pending_evictions` (ids already commanded to go, neither chosen again nor counted twice) and
    `suppress_changed` (when the batch allowance last changed, for the suppression dwell).
    """
    problem = _mapping(problem, "problem")
    config = parse_config(problem.get("config"), "config")
    node = parse_node(problem.get("node"))
    now = _number(problem.get("now"), "now", minimum=None)
    registry = parse_containers(problem.get("containers", []))
    samples = [parse_sample(raw, f"samples[{i}]") for i, raw in enumerate(_list(problem.get("samples", []), "samples"))]
    for index, sample in enumerate(samples):
        if sample.time > now:
            raise InvalidInput(f"samples[{index}].time", f"{sample.time} is after now ({now})")
    forbid = _mapping(problem.get("forbid_schedule") or {}, "forbid_schedule")
    pending = _list(problem.get("pending_evictions") or [], "pending_evictions")
    state = NodeState(
        last_cpu_eviction=_optional_time(problem, "last_cpu_eviction"),
        last_memory_eviction=_optional_time(problem, "last_memory_eviction"),
        suppress_changed=_optional_time(problem, "suppress_changed"),
        forbid_cpu=bool(forbid.get("cpu", False)),
        forbid_memory=bool(forbid.get("memory", False)),
        pending=frozenset(str(p) for p in pending),
        budgets={
            b.workload: b
            for b in (
                budget_from_dict(_mapping(raw, f"budgets[{i}]"), f"budgets[{i}]")
                for i, raw in enumerate(_list(problem.get("budgets") or [], "budgets"))
            )
        },
    )
    return EvictProblem(config, node, now, state, registry, build_window(config, node, registry, samples))


def decide_problem(parsed: EvictProblem) -> Decision:
    """`decide` on a parsed problem: what the service decided when it recorded that input."""
    window = parsed.window
    return decide(
        parsed.config, parsed.node, parsed.now, parsed.state, window.stats(parsed.now), window.newest, parsed.registry
    )


def solve_evict(problem: Mapping[str, Any]) -> dict[str, Any]:
    """`eru plan` kind `evict` (docs/planning.md): one node's decision at `now`; `InvalidInput` naming the field for a
    bad problem.

    Optional beyond the schema in docs/planning.md: `forbid_schedule` {cpu, memory} (the previous flags, for the
    hysteresis) and `pending_evictions` (ids already commanded to go, neither chosen again nor counted twice).
    """
    return answer(decide_problem(parse_evict_problem(problem)))


def sample_dict(sample: Sample) -> dict[str, Any]:
    """A sample in the schema of docs/planning.md."""
    return {
        "time": sample.time,
        "node_cpu_used": cores(sample.node_cpu_used),
        "node_memory_used": sample.node_memory_used,
        "batch_cpu_allowed": None if sample.batch_cpu_allowed is None else cores(sample.batch_cpu_allowed),
        "containers": {
            cid: {"cpu_used": cores(u.cpu_used), "memory_used": u.memory_used} for cid, u in sample.containers.items()
        },
    }


def container_dict(info: ContainerInfo) -> dict[str, Any]:
    """A registry entry in the schema of docs/planning.md."""
    return {
        "id": info.id,
        "class": info.priority_class,
        "priority": info.priority,
        "cpu_request": cores(info.cpu_request),
        "memory_request": info.memory_request,
        "cpu_limit": cores(info.cpu_limit),
        "memory_limit": info.memory_limit,
        **({"workload": info.workload} if info.workload else {}),
        **({"work": info.work} if info.work else {}),
        **({"evictions": info.evictions} if info.evictions else {}),
        **({"cpu_cores": info.cpu_cores} if info.cpu_cores else {}),
    }


def evict_problem(
    config: ColocationConfig,
    node: NodeSpec,
    now: float,
    state: NodeState,
    registry: Mapping[str, ContainerInfo],
    points: Iterable[WindowPoint],
) -> dict[str, Any]:
    """The whole input of a decision as a docs/planning.md `evict` problem (what the service records with each
    event)."""
    samples = [p.payload for p in points if isinstance(p.payload, Sample)]
    return {
        "kind": "evict",
        "config": config.to_dict(),
        "node": {"name": node.name, "cpu": cores(node.cpu), "memory": node.memory},
        "now": now,
        "last_cpu_eviction": state.last_cpu_eviction,
        "last_memory_eviction": state.last_memory_eviction,
        "suppress_changed": state.suppress_changed,
        "forbid_schedule": {"cpu": state.forbid_cpu, "memory": state.forbid_memory},
        "pending_evictions": sorted(state.pending),
        "containers": [container_dict(info) for info in registry.values()],
        "budgets": [budget.to_dict(now) for _, budget in sorted(state.budgets.items())],
        "samples": [sample_dict(s) for s in samples],
    }
