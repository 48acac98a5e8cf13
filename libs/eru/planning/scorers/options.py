"""How the `score` mode gets its per-node inputs: through `PlacementRequest.options` (never through labels).

```python
options = {
    "scorers": {"least-allocated": 1, "qos-balance": 2},         # plugin weights; default least + balanced, 1 each
    "request": {"cpu": 150, "memory": 1073741824},               # one incoming instance, in node units
    "resource_weights": {"cpu": 1, "memory": 1},                 # for least/most-allocated; default 1 each
    "qos_class": "Burstable",                                    # of the incoming instance (needed by qos-balance)
    "nodes": {"n1": {"allocatable": {"cpu": 3200, "memory": 68719476736},
                     "requested": {"cpu": 1200, "memory": 8589934592},
                     "qos": {"Guaranteed": 3, "Burstable": 1, "BestEffort": 0}}},
}
```
`score_options(...)` builds this dict (values may also be `NodeLoad` objects). The resources scored are the keys of
`request`, in that order. Without `request`/`nodes` the resource plugins fall back to the slot's `usage` and `rate`
as one resource "primary" (allocatable 10⁶, requested usage · 10⁶, the instance rate · 10⁶), so `score` also works
on capacity-only nodes; without `qos` a node counts no instances of any class.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eru.errors import InvalidInput
from eru.planning.scorers.base import QOS_CLASSES, Scorer, ScoreState, get_scorer
from eru.planning.scorers.qos import qos_index

DEFAULT_SCORERS: dict[str, float] = {"least-allocated": 1, "balanced-allocation": 1}
"""Kubernetes' default profile scores with NodeResourcesFit (LeastAllocated) and BalancedAllocation, weight 1 each."""

PRIMARY_SCALE = 1_000_000
MAX_AMOUNT = 2**53
_OPTION_FIELDS = {"scorers", "request", "resource_weights", "qos_class", "nodes"}


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """One node's inputs for the resource and QoS scorers."""

    allocatable: Mapping[str, int]
    requested: Mapping[str, int] = field(default_factory=dict)
    qos: Mapping[str, int] = field(default_factory=dict)


def score_options(
    *,
    request: Mapping[str, int] | None = None,
    nodes: Mapping[str, NodeLoad] | None = None,
    scorers: Mapping[str, float] | None = None,
    qos_class: str | None = None,
    resource_weights: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The `options` of a `score` placement request (only the given parts)."""
    options: dict[str, Any] = {}
    for key, value in (
        ("request", request),
        ("nodes", nodes),
        ("scorers", scorers),
        ("qos_class", qos_class),
        ("resource_weights", resource_weights),
    ):
        if value is not None:
            options[key] = value
    return options


def merge_weights(pod: Mapping[str, float] | None, request: Mapping[str, float] | None) -> dict[str, float]:
    """Plugin weights: the pod's policy, overridden scorer by scorer by the request's (weight 0 switches one off);
    Kubernetes' default profile when neither gives any."""
    merged = dict(pod or {})
    merged.update(request or {})
    return merged or dict(DEFAULT_SCORERS)


def _amount(value: object, field_name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InvalidInput(field_name, f"expected an integer amount, got {value!r}")
    if not 0 <= int(value) <= MAX_AMOUNT:
        raise InvalidInput(field_name, f"must be between 0 and 2^53, got {value}")
    return int(value)


def _mapping(value: object, field_name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidInput(field_name, f"expected an object, got {type(value).__name__}")
    return value


def parse_scorers(options: Mapping[str, Any]) -> list[tuple[str, Scorer, float]]:
    """(name, scorer, weight) for every scorer with weight > 0, in the given order."""
    raw = _mapping(options.get("scorers", DEFAULT_SCORERS), "options.scorers")
    chosen: list[tuple[str, Scorer, float]] = []
    for name, weight in raw.items():
        scorer = get_scorer(str(name))
        where = f"options.scorers.{name}"
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight) or weight < 0:
            raise InvalidInput(where, f"expected a finite weight ≥ 0, got {weight!r}")
        if weight > 0:
            chosen.append((str(name), scorer, float(weight)))
    if not chosen:
        raise InvalidInput("options.scorers", "needs at least one scorer with a weight > 0")
    return chosen


def build_state(names: tuple[str, ...], usage: Any, rate: Any, options: Mapping[str, Any]) -> ScoreState:
    """The scorers' columns for nodes `names` from `options` (see the module doc); `usage` and `rate` are callables
    returning the slots' columns, called only for the fallback."""
    unknown = set(options) - _OPTION_FIELDS
    if unknown:
        raise InvalidInput("options", f"unknown score options {sorted(unknown)} (known: {sorted(_OPTION_FIELDS)})")
    size = len(names)
    raw_nodes = _mapping(options.get("nodes", {}), "options.nodes")
    qos_class = options.get("qos_class")
    qos = None if qos_class is None else qos_index(str(qos_class))
    qos_counts = np.zeros((size, len(QOS_CLASSES)), dtype=np.int64)
    if "request" in options:
        raw_request = _mapping(options["request"], "options.request")
        resources = tuple(str(name) for name in raw_request)
        one = [_amount(raw_request[r], f"options.request.{r}") for r in resources]
        request = np.tile(np.array(one, dtype=np.int64), (size, 1))
        allocatable = np.zeros((size, len(resources)), dtype=np.int64)
        requested = np.zeros((size, len(resources)), dtype=np.int64)
        for name in names:
            if name not in raw_nodes:
                raise InvalidInput(f"options.nodes.{name}", "missing: every node needs its allocatable resources")
    else:
        resources = ("primary",)
        allocatable = np.full((size, 1), PRIMARY_SCALE, dtype=np.int64)
        requested = np.rint(np.asarray(usage(), dtype=np.float64) * PRIMARY_SCALE).astype(np.int64).reshape(size, 1)
        request = np.rint(np.asarray(rate(), dtype=np.float64) * PRIMARY_SCALE).astype(np.int64).reshape(size, 1)
    for row, name in enumerate(names):
        entry = raw_nodes.get(name)
        if entry is None:
            continue
        where = f"options.nodes.{name}"
        load = entry if isinstance(entry, NodeLoad) else _node_load(_mapping(entry, where), where)
        if "request" in options:
            for column, resource in enumerate(resources):
                allocatable[row, column] = _amount(load.allocatable.get(resource, 0), f"{where}.allocatable.{resource}")
                requested[row, column] = _amount(load.requested.get(resource, 0), f"{where}.requested.{resource}")
        for cls, count in load.qos.items():
            qos_counts[row, qos_index(str(cls), f"{where}.qos")] = _amount(count, f"{where}.qos.{cls}")
    raw_weights = _mapping(options.get("resource_weights", {}), "options.resource_weights")
    for resource in raw_weights:
        if resource not in resources:
            raise InvalidInput(f"options.resource_weights.{resource}", f"not a scored resource ({list(resources)})")
    weights = np.array(
        [_amount(raw_weights.get(r, 1), f"options.resource_weights.{r}") for r in resources], dtype=np.int64
    )
    return ScoreState(resources, allocatable, requested, request, weights, qos_counts, qos)


def _node_load(entry: Mapping[str, Any], where: str) -> NodeLoad:
    unknown = set(entry) - {"allocatable", "requested", "qos"}
    if unknown:
        raise InvalidInput(where, f"unknown fields {sorted(unknown)} (known: allocatable, requested, qos)")
    return NodeLoad(
        allocatable=_mapping(entry.get("allocatable", {}), f"{where}.allocatable"),
        requested=_mapping(entry.get("requested", {}), f"{where}.requested"),
        qos=_mapping(entry.get("qos", {}), f"{where}.qos"),
    )
