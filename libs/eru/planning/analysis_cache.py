"""Node analyses kept across the requests of one batch (docs/pipeline.md "Performance").

The requests of a batch are decided one after the other, each against the snapshot the previous ones left
(`ClusterSnapshot.charged`). Charging replaces only the nodes a plan used; every other node object stays the same.
A node's analysis and usage for a request are pure functions of (node, request, config), so they are computed once
per node object and request shape and reused while the node object is the same — a batch of single-container
requests over 16 nodes analyses one node per request instead of 16. The results are the same objects
`analyse_nodes` and `node_usage` would return: decisions do not change.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress, count
from operator import is_not

from eru.planning.capacity import NodeAnalysis, analyse_nodes, node_usage
from eru.planning.request import NormalizedRequest, PlanningConfig
from eru.planning.resources import NodeResources

Entry = tuple[NodeResources, NodeAnalysis, tuple[float, float]]
"""(the node object, its analysis, its (usage, rate)): valid while the snapshot holds this very node object."""


MAX_SHAPES = 16
"""Request shapes whose analyses are kept; the least recently used one goes first (each holds every node's)."""


class AnalysisCache:
    """node name → its last analysis, per request shape and config. One per batch, or one per allocator process
    across its batches (docs/planning.md "Per-batch cost": the node cache keeps an unchanged node the same object,
    so a batch analyses only the nodes changed since the last one); not shared across threads."""

    __slots__ = ("_entries", "_last", "_orders", "max_shapes")

    def __init__(self, max_shapes: int = MAX_SHAPES) -> None:
        self._entries: dict[tuple[NormalizedRequest, PlanningConfig], dict[str, Entry]] = {}
        self._last: dict[tuple[NormalizedRequest, PlanningConfig], Result] = {}  # per shape: the last call's
        self._orders: dict[tuple[str, ...], bool] = {}  # core ids → in preference order (`analyse_nodes`)
        self.max_shapes = max_shapes

    def analyse(
        self, nodes: Sequence[NodeResources], request: NormalizedRequest, config: PlanningConfig
    ) -> tuple[tuple[NodeAnalysis, ...], tuple[tuple[float, float], ...]]:
        """`analyse_nodes(nodes, request, config)` and every node's `node_usage`, in node order; only the nodes
        whose object changed since the last call (or never seen) are analysed again.

        When `nodes` is as long as the last call's for this shape (the next request of a batch, the next batch of a
        pod: a few nodes charged, the rest the same objects), the last call's results are copied and only the
        positions whose node object differs are looked up: one identity test per node instead of two lookups by
        name. Every result is still the analysis of the very node object at its position."""
        key = (request, config)
        known = self._entries.pop(key, None)
        if known is None:
            known = {}
            self._last.pop(key, None)
            while len(self._entries) >= self.max_shapes:
                evicted = next(iter(self._entries))
                del self._entries[evicted]
                self._last.pop(evicted, None)
        self._entries[key] = known  # the most recently used last
        last = self._last.get(key)
        if last is not None and len(last[0]) == len(nodes):
            result = _patched(last, nodes, known, request, config, self._orders)
        else:
            fresh = [node for node in nodes if (entry := known.get(node.name)) is None or entry[0] is not node]
            _analyse_into(known, fresh, request, config, self._orders)
            entries = [known[node.name] for node in nodes]
            result = (
                tuple(nodes),
                tuple(entry[1] for entry in entries),
                tuple(entry[2] for entry in entries),
            )
        self._last[key] = result
        return result[1], result[2]


Result = tuple[tuple[NodeResources, ...], tuple[NodeAnalysis, ...], tuple[tuple[float, float], ...]]
"""(the nodes of a call, their analyses, their usages), in node order."""


def _patched(
    last: Result,
    nodes: Sequence[NodeResources],
    known: dict[str, Entry],
    request: NormalizedRequest,
    config: PlanningConfig,
    orders: dict[tuple[str, ...], bool],
) -> Result:
    """The last call's results with the positions whose node object changed looked up (analysed if new)."""
    before, analyses, usages = last
    changed = list(compress(count(), map(is_not, nodes, before)))  # one identity test per node, in C
    if not changed:
        return (before, analyses, usages)
    fresh = []
    for at in changed:
        node = nodes[at]
        entry = known.get(node.name)
        if entry is None or entry[0] is not node:
            fresh.append(node)
    _analyse_into(known, fresh, request, config, orders)
    new_analyses, new_usages = list(analyses), list(usages)
    for at in changed:
        entry = known[nodes[at].name]
        new_analyses[at], new_usages[at] = entry[1], entry[2]
    return (tuple(nodes), tuple(new_analyses), tuple(new_usages))


def _analyse_into(
    known: dict[str, Entry],
    fresh: list[NodeResources],
    request: NormalizedRequest,
    config: PlanningConfig,
    orders: dict[tuple[str, ...], bool],
) -> None:
    if fresh:
        for node, analysis in zip(fresh, analyse_nodes(fresh, request, config, orders), strict=True):
            known[node.name] = (node, analysis, node_usage(node, request))


__all__ = ["AnalysisCache"]
