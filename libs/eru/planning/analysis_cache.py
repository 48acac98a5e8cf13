"""Node analyses kept across the requests of one batch (docs/pipeline.md "Performance").

The requests of a batch are decided one after the other, each against the snapshot the previous ones left
(`ClusterSnapshot.charged`). Charging replaces only the nodes a plan used; every other node object stays the same.
A node's analysis and usage for a request are pure functions of (node, request, config), so they are computed once
per node object and request shape and reused while the node object is the same — a batch of single-container
requests over 16 nodes analyses one node per request instead of 16. The results are the same objects
`analyse_nodes` and `node_usage` would return: decisions do not change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import compress, count
from operator import attrgetter, is_not
from typing import NamedTuple

from eru.planning.capacity import NodeAnalysis, analyse_nodes, node_usage
from eru.planning.request import NormalizedRequest, PlanningConfig
from eru.planning.resources import NodeResources

_NAME, _CAPACITY = attrgetter("name"), attrgetter("capacity")

Entry = tuple[NodeResources, NodeAnalysis, tuple[float, float]]
"""(the node object, its analysis, its (usage, rate)): valid while the snapshot holds this very node object."""


MAX_SHAPES = 16
"""Request shapes whose analyses are kept; the least recently used one goes first (each holds every node's)."""


class AnalysisCache:
    """node name → its last analysis, per request shape and config. One per batch, or one per allocator process
    across its batches (docs/planning.md "Per-batch cost": the node cache keeps an unchanged node the same object,
    so a batch analyses only the nodes changed since the last one); not shared across threads."""

    __slots__ = ("_entries", "_index", "_last", "_orders", "max_shapes")

    def __init__(self, max_shapes: int = MAX_SHAPES) -> None:
        self._entries: dict[tuple[NormalizedRequest, PlanningConfig], dict[str, Entry]] = {}
        self._last: dict[tuple[NormalizedRequest, PlanningConfig], Result] = {}  # per shape: the last call's
        self._orders: dict[tuple[str, ...], bool] = {}  # core ids → in preference order (`analyse_nodes`)
        self._index: NameIndex | None = None  # the last node names seen, shared by every shape while they hold
        self.max_shapes = max_shapes

    def analyse(
        self, nodes: Sequence[NodeResources], request: NormalizedRequest, config: PlanningConfig
    ) -> tuple[tuple[NodeAnalysis, ...], tuple[tuple[float, float], ...]]:
        """`analyse_nodes(nodes, request, config)` and every node's `node_usage`, in node order (see `analysed`)."""
        result = self.analysed(nodes, request, config)
        return result.analyses, result.usages

    def analysed(self, nodes: Sequence[NodeResources], request: NormalizedRequest, config: PlanningConfig) -> Result:
        """`analyse_nodes(nodes, request, config)` and every node's `node_usage`, in node order; only the nodes
        whose object changed since the last call (or never seen) are analysed again.

        When `nodes` is as long as the last call's for this shape (the next request of a batch, the next batch of a
        pod: a few nodes charged, the rest the same objects), the last call's results are copied and only the
        positions whose node object differs are looked up: one identity test per node instead of two lookups by
        name. Every result is still the analysis of the very node object at its position. The node names and the
        capacities come as columns too, patched the same way (docs/planning.md "Per-batch cost": the placement
        input is not rebuilt from every node per request), the names with their positions (`NameIndex`)."""
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
        if last is not None and len(last.nodes) == len(nodes):
            result = _patched(last, nodes, known, request, config, self._orders)
        else:
            fresh = [node for node in nodes if (entry := known.get(node.name)) is None or entry[0] is not node]
            _analyse_into(known, fresh, request, config, self._orders)
            entries = [known[node.name] for node in nodes]
            analyses = tuple(entry[1] for entry in entries)
            result = Result(
                tuple(nodes),
                analyses,
                tuple(entry[2] for entry in entries),
                tuple(map(_CAPACITY, analyses)),
                NameIndex(tuple(map(_NAME, nodes))),
            )
        shared = self._index  # the last names seen, whatever the shape: their positions are built once
        if result.names is not shared:
            if shared is not None and (shared.names is result.names.names or shared.names == result.names.names):
                result = result._replace(names=shared)
            else:
                self._index = result.names
        self._last[key] = result
        return result


class NameIndex:
    """A call's node names in node order and, built the first time they are asked for, each name's position."""

    __slots__ = ("_positions", "names")

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self._positions: dict[str, int] | None = None

    def positions(self) -> dict[str, int] | None:
        """name → its position, built once; None when a name is here twice (each position then looks its own up)."""
        positions = self._positions
        if positions is None:
            positions = self._positions = {name: at for at, name in enumerate(self.names)}
        return positions if len(positions) == len(self.names) else None

    def count_column(self, counts: Mapping[str, int]) -> list[int] | None:
        """`counts.get(name, 0)` for every name, in order, set at the positions of the names `counts` holds; None
        when `counts` names a node that is not here, or a name is here twice (then each position looks its own up)."""
        positions = self.positions()
        if positions is None:
            return None
        column = [0] * len(self.names)
        for name, number in counts.items():
            at = positions.get(name)
            if at is None:
                return None
            column[at] = number
        return column


class Result(NamedTuple):
    """A call's results, in node order."""

    nodes: tuple[NodeResources, ...]
    analyses: tuple[NodeAnalysis, ...]
    usages: tuple[tuple[float, float], ...]
    capacity: tuple[int, ...]
    """Each analysis's capacity (the placement input's column)."""
    names: NameIndex


def _patched(
    last: Result,
    nodes: Sequence[NodeResources],
    known: dict[str, Entry],
    request: NormalizedRequest,
    config: PlanningConfig,
    orders: dict[tuple[str, ...], bool],
) -> Result:
    """The last call's results with the positions whose node object changed looked up (analysed if new)."""
    before, analyses, usages, capacity, names = last
    changed = list(compress(count(), map(is_not, nodes, before)))  # one identity test per node, in C
    if not changed:
        return last
    fresh = []
    for at in changed:
        node = nodes[at]
        entry = known.get(node.name)
        if entry is None or entry[0] is not node:
            fresh.append(node)
    _analyse_into(known, fresh, request, config, orders)
    new_analyses, new_usages, new_capacity = list(analyses), list(usages), list(capacity)
    renamed = False
    for at in changed:
        node = nodes[at]
        entry = known[node.name]
        new_analyses[at], new_usages[at], new_capacity[at] = entry[1], entry[2], entry[1].capacity
        renamed = renamed or node.name != names.names[at]
    index = NameIndex(tuple(map(_NAME, nodes))) if renamed else names
    return Result(tuple(nodes), tuple(new_analyses), tuple(new_usages), tuple(new_capacity), index)


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


__all__ = ["AnalysisCache", "NameIndex", "Result"]
