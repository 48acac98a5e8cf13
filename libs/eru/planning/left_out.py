"""Why a node of the pod is not chosen (docs/planning.md "Nodes left out"), pure: every node a deploy decision does
not place on gets a typed reason with its numbers, counted per reason (Nomad's `AllocMetric.FilterNode`).

Reasons, in the order a summary lists them:

- `filtered`: the request's node filter leaves the node out (`eru.planning.node_filter`: `not in --nodes`,
  `excluded by --exclude-nodes`, `label disk=ssd does not match (disk=hdd)`);
- `forbid_watermark`: a batch request, the node's newest condition forbids new batch instances
  (`forbid watermark: batch class, cpu 82% ≥ forbid 70%`);
- `cordoned`: an operator cordoned the node;
- `down`: the node is marked down, or its agent has been silent past the limit (`down (no heartbeat for 45 s)`);
- `avoided`: the pod's eviction memory keeps this workload off the node (docs/colocation.md);
- `too_small`: the node has no room for one instance (`too small: needs 4 cores, 2.5 free`).

The snapshot carries the states (`ClusterSnapshot.unschedulable`, `forbid_batch` and `watermarks`); the decision
record holds them (`"unschedulable"`, `"forbid_batch"`), so `eru explain` and `eru replay` see what the allocator saw.
A refusal's message names at most `MAX_NAMED` nodes per reason; its details list at most `MAX_LISTED` nodes, with
every node counted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from eru.errors import InvalidInput
from eru.units import format_bytes

REASONS = ("filtered", "forbid_watermark", "cordoned", "down", "avoided", "too_small")
"""Reason codes, in the order a summary lists them."""
MAX_NAMED = 3
"""Nodes named per reason in a refusal's message (the others counted: `… and 7 more`)."""
MAX_LISTED = 100
"""Nodes listed in a refusal's details (`left_out`); `left_out_counts` counts every one."""

_PHRASES = {
    "filtered": "filtered",
    "forbid_watermark": "at forbid watermark",
    "cordoned": "cordoned",
    "down": "down",
    "avoided": "avoided after evictions",
    "too_small": "too small",
}


@dataclass(frozen=True, slots=True)
class NodeState:
    """Why a node of the pod is not schedulable at all, as the store read it."""

    cordoned: bool = False
    down: bool = False
    silent_seconds: int | None = field(default=None, compare=False)
    """Seconds since the agent's last heartbeat when that is past the limit. Not compared: two reads of an
    unchanged pod differ only in it, and the decisions do not depend on it (only their wording)."""

    def to_dict(self) -> dict[str, Any]:
        """The record form: `{"cordoned": true}`, `{"down": true, "silent_seconds": 45}`."""
        out: dict[str, Any] = {}
        if self.cordoned:
            out["cordoned"] = True
        if self.down:
            out["down"] = True
        if self.silent_seconds is not None:
            out["silent_seconds"] = self.silent_seconds
        return out


@dataclass(frozen=True, slots=True)
class Watermark:
    """One resource at its forbid watermark: the newest usage and the watermark (percent of capacity; None when the
    condition did not carry them)."""

    resource: str
    percent: float | None = None
    watermark: float | None = None


@dataclass(frozen=True, slots=True)
class LeftOut:
    """A node not chosen: the reason code, the sentence a person reads, the short form a summary names it by, and
    the numbers."""

    node: str
    reason: str
    why: str
    brief: str
    numbers: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """`{"node", "reason", "why", "numbers"}`."""
        return {"node": self.node, "reason": self.reason, "why": self.why, "numbers": dict(self.numbers)}


def _number(value: float) -> str:
    return f"{round(value, 1):g}"


def unschedulable(name: str, state: NodeState) -> LeftOut:
    """The reason of a node left out before planning: down (the silence with it) before cordoned."""
    if state.down or state.silent_seconds is not None:
        silent = state.silent_seconds
        detail = f"no heartbeat for {silent} s" if silent is not None else "marked down"
        return LeftOut(name, "down", f"down ({detail})", f"{name} {detail}", state.to_dict())
    return LeftOut(name, "cordoned", "cordoned", name, state.to_dict())


def forbidden(name: str, marks: Iterable[Watermark]) -> LeftOut:
    """The reason of a node whose condition forbids new batch instances, with the numbers the condition carried."""
    parts, briefs, numbers = [], [], {}
    for mark in marks:
        if mark.percent is not None and mark.watermark is not None:
            parts.append(f"{mark.resource} {_number(mark.percent)}% ≥ forbid {_number(mark.watermark)}%")
            briefs.append(f"{mark.resource} {_number(mark.percent)}% ≥ {_number(mark.watermark)}%")
        else:
            parts.append(f"{mark.resource} at forbid")
            briefs.append(mark.resource)
        numbers[mark.resource] = {"percent": mark.percent, "watermark": mark.watermark}
    why = "forbid watermark: batch class" + (f", {', '.join(parts)}" if parts else "")
    brief = f"{name} {', '.join(briefs)}" if briefs else name
    return LeftOut(name, "forbid_watermark", why, brief, numbers)


def avoided(name: str, explained: str) -> LeftOut:
    """A node the pod's eviction memory keeps the workload off (`explained`: `Avoidance.explain()`)."""
    return LeftOut(name, "avoided", f"avoided: {explained}", name, {})


def too_small(name: str, entry: Mapping[str, Any], cores_needed: float, memory_needed: int) -> LeftOut:
    """A node with no room for one instance; `entry` is `eru.planning.explain.explain_node`'s numbers."""
    limited = entry.get("limited_by")
    if limited == "cpu":
        detail = f"needs {_number(cores_needed)} cores, {_number(float(entry.get('free_cpu') or 0))} free"
    elif limited == "memory":
        free = entry.get("free_memory")
        free_text = format_bytes(int(free)) if isinstance(free, int) else "?"
        detail = f"needs {format_bytes(memory_needed)} memory, {free_text} free"
    elif limited == "cores":
        detail = f"needs {_number(cores_needed)} cores, the node has {entry.get('cores')}"
    elif limited in ("batch_cpu", "batch_memory"):
        allowance = entry.get("batch_allowance") or {}
        if limited == "batch_cpu":
            cpu = allowance.get("cpu")
            left = "none" if cpu is None else f"{_number(float(cpu))} cores"
            detail = f"batch allowance {left}, needs {_number(cores_needed)} cores"
        else:
            memory = allowance.get("memory")
            left = "none" if memory is None else format_bytes(int(memory))
            detail = f"batch allowance {left} memory, needs {format_bytes(memory_needed)}"
    else:
        detail = "no room for one instance"
    return LeftOut(name, "too_small", f"too small: {detail}", f"{name} {detail}", dict(entry))


def counts(left_out: Iterable[LeftOut]) -> dict[str, int]:
    """reason → nodes, in `REASONS` order."""
    found: dict[str, int] = {}
    for entry in left_out:
        found[entry.reason] = found.get(entry.reason, 0) + 1
    return {reason: found[reason] for reason in REASONS if reason in found}


def summary(left_out: Iterable[LeftOut], named: int = MAX_NAMED) -> str:
    """`3 at forbid watermark (n1 cpu 82% ≥ 70%, n2 …, n3 …), 1 cordoned (n4)`: per reason the count and at most
    `named` nodes (the others counted); empty when nothing was left out."""
    by_reason: dict[str, list[LeftOut]] = {}
    for entry in left_out:
        by_reason.setdefault(entry.reason, []).append(entry)
    parts = []
    for reason in REASONS:
        entries = by_reason.get(reason)
        if not entries:
            continue
        names = [entry.brief for entry in entries[:named]]
        if len(entries) > named:
            names.append(f"… and {len(entries) - named} more")
        parts.append(f"{len(entries)} {_PHRASES[reason]} ({', '.join(names)})")
    return ", ".join(parts)


def details(left_out: Iterable[LeftOut], listed: int = MAX_LISTED) -> dict[str, Any]:
    """A refusal's details: `left_out` (at most `listed` nodes) and `left_out_counts` (every node)."""
    entries = list(left_out)
    return {"left_out": [entry.to_dict() for entry in entries[:listed]], "left_out_counts": counts(entries)}


def states_json(states: Mapping[str, NodeState]) -> dict[str, Any]:
    """The record's `"unschedulable"`: node → `NodeState.to_dict()`, sorted by name."""
    return {name: states[name].to_dict() for name in sorted(states)}


def parse_states(raw: Any, field_name: str = "unschedulable") -> dict[str, NodeState]:
    """A problem's `"unschedulable"` (`InvalidInput` naming the field)."""
    if not isinstance(raw, Mapping):
        raise InvalidInput(field_name, f"expected an object of node name → state, got {type(raw).__name__}")
    states = {}
    for name, entry in raw.items():
        where = f"{field_name}.{name}"
        if not isinstance(entry, Mapping):
            raise InvalidInput(where, f"expected an object, got {type(entry).__name__}")
        unknown = set(entry) - {"cordoned", "down", "silent_seconds"}
        if unknown:
            raise InvalidInput(f"{where}.{sorted(unknown)[0]}", "unknown field (known: cordoned, down, silent_seconds)")
        flags = {key: entry.get(key, False) for key in ("cordoned", "down")}
        for key, value in flags.items():
            if not isinstance(value, bool):
                raise InvalidInput(f"{where}.{key}", f"expected true or false, got {value!r}")
        silent = entry.get("silent_seconds")
        if silent is not None and (isinstance(silent, bool) or not isinstance(silent, int) or silent < 0):
            raise InvalidInput(f"{where}.silent_seconds", f"expected a non-negative integer, got {silent!r}")
        if not (flags["cordoned"] or flags["down"] or silent is not None):
            raise InvalidInput(where, "a node left out is cordoned, down or silent")
        states[str(name)] = NodeState(flags["cordoned"], flags["down"], silent)
    return states


def forbid_json(names: Iterable[str], marks: Mapping[str, tuple[Watermark, ...]]) -> dict[str, Any]:
    """The record's `"forbid_batch"`: node → resource → `{"percent", "watermark"}`, sorted by name."""
    return {
        name: {mark.resource: {"percent": mark.percent, "watermark": mark.watermark} for mark in marks.get(name, ())}
        for name in sorted(names)
    }


def parse_forbid(raw: Any, field_name: str = "forbid_batch") -> tuple[frozenset[str], dict[str, tuple[Watermark, ...]]]:
    """A problem's `"forbid_batch"`: the nodes and their watermarks (`InvalidInput` naming the field)."""
    if not isinstance(raw, Mapping):
        raise InvalidInput(field_name, f"expected an object of node name → watermarks, got {type(raw).__name__}")
    marks: dict[str, tuple[Watermark, ...]] = {}
    for name, entry in raw.items():
        where = f"{field_name}.{name}"
        if not isinstance(entry, Mapping):
            raise InvalidInput(where, f"expected an object of resource → numbers, got {type(entry).__name__}")
        found = []
        for resource, numbers in entry.items():
            if resource not in ("cpu", "memory"):
                raise InvalidInput(f"{where}.{resource}", "unknown resource (known: cpu, memory)")
            if not isinstance(numbers, Mapping):
                raise InvalidInput(f"{where}.{resource}", f"expected an object, got {type(numbers).__name__}")
            values = [_percent(numbers.get(key), f"{where}.{resource}.{key}") for key in ("percent", "watermark")]
            found.append(Watermark(str(resource), values[0], values[1]))
        marks[str(name)] = tuple(found)
    return frozenset(marks), marks


def _percent(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise InvalidInput(where, f"expected a percentage, got {value!r}")
    return value


def condition_marks(conditions: Any) -> tuple[Watermark, ...]:
    """The forbid watermarks a node's stored condition (`NodeCondition` as JSON) reports: per resource whose
    `forbid_schedule_*` is set, its usage percent and its `*_forbid` watermark."""
    if not isinstance(conditions, Mapping):
        return ()
    marks = []
    watermarks = conditions.get("watermarks")
    watermarks = watermarks if isinstance(watermarks, Mapping) else {}
    for resource in ("cpu", "memory"):
        if not conditions.get(f"forbid_schedule_{resource}"):
            continue
        percent, mark = conditions.get(f"{resource}_percent"), watermarks.get(f"{resource}_forbid")
        marks.append(Watermark(resource, _as_number(percent), _as_number(mark)))
    return tuple(marks)


def _as_number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


__all__ = [
    "MAX_LISTED",
    "MAX_NAMED",
    "REASONS",
    "LeftOut",
    "NodeState",
    "Watermark",
    "avoided",
    "condition_marks",
    "counts",
    "details",
    "forbid_json",
    "forbidden",
    "parse_forbid",
    "parse_states",
    "states_json",
    "summary",
    "too_small",
    "unschedulable",
]
