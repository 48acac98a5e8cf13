"""Eviction memory in a deploy decision (docs/colocation.md "Memory of evictions"), pure.

A batch deploy problem may carry the workload's recent evictions, the time and the back-off settings:

    {"kind": "deploy", …, "workload": "web-batch", "now": 1700000000.0,
     "evictions": [{"workload": "web-batch", "instance": "c1", "node": "n2", "time": 1699999760.0}],
     "keep": {"avoid_seconds": 600}}

The nodes the history avoids are taken out of the placement and named in the answer (`"avoided": {"n2": "evicted
web-batch 4 min ago, back-off 10 min"}`). The allocator records exactly these fields with every batch decision, so
`eru replay` re-runs the avoidance too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from eru.colocation.backoff import Avoidance, Eviction, KeepConfig, avoided_nodes, eviction_from_dict, parse_keep_config
from eru.errors import InvalidInput

FIELDS = frozenset({"workload", "now", "evictions", "keep"})


def memory_of(problem: Mapping[str, Any]) -> dict[str, Avoidance]:
    """The nodes a deploy problem's eviction history avoids at its `now` ({} without a history)."""
    parsed = history_of(problem)
    if parsed is None:
        return {}
    workload, now, history, config = parsed
    return avoided_nodes(history, workload, now, config)


def history_of(problem: Mapping[str, Any]) -> tuple[str, float, list[Eviction], KeepConfig] | None:
    """A deploy problem's eviction memory: workload, `now`, history and back-off settings (None without one);
    `InvalidInput` naming the field."""
    raw = problem.get("evictions")
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise InvalidInput("evictions", f"expected a list, got {type(raw).__name__}")
    workload = problem.get("workload")
    if not isinstance(workload, str) or not workload:
        raise InvalidInput("workload", "a problem with evictions names its workload")
    now = problem.get("now")
    if isinstance(now, bool) or not isinstance(now, int | float) or not math.isfinite(now):
        raise InvalidInput("now", f"expected a time in seconds, got {now!r}")
    history = [eviction_from_dict(item, f"evictions[{index}]") for index, item in enumerate(raw)]
    return workload, float(now), history, parse_keep_config(problem.get("keep"), "keep")


def without_avoided(nodes: Sequence[Any], avoided: Mapping[str, Avoidance]) -> list[Any]:
    """`nodes` (objects with `.name`, or mappings with "name") less the avoided ones."""

    def key(node: Any) -> str | None:
        name = node.get("name") if isinstance(node, Mapping) else getattr(node, "name", None)
        return name if isinstance(name, str) else None  # a malformed name is named later by the node's parser

    if not avoided:
        return list(nodes)
    return [node for node in nodes if not isinstance(key(node), str) or key(node) not in avoided]


def explain(avoided: Mapping[str, Avoidance]) -> dict[str, str]:
    """node → why it is avoided, for the answer."""
    return {node: avoidance.explain() for node, avoidance in sorted(avoided.items())}


def problem_fields(workload: str, now: float, history: Sequence[Eviction], config: KeepConfig) -> dict[str, Any]:
    """The fields a batch decision records so that its avoidance replays."""
    return {
        "workload": workload,
        "now": now,
        "evictions": [e.to_dict() for e in history],
        "keep": config.to_dict(),
    }
