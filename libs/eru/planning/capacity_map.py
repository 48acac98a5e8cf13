"""`NodeCapacities`: node → instances of the request it can take, read off the staged nodes and their analyses
without building a dict of every node (docs/planning.md "Per-batch cost").

`conclude` checks a placement against the capacity of the nodes placed on, and the allocator records the capacity
of those nodes only (`Plan.recorded_answer`): on a 5,000-node pod, a request placed on ~100 nodes needs ~100 of the
5,000 capacities. A lookup bisects the nodes (a snapshot's are sorted by name, `eru.planning.resources.
node_positions`); iterating, a name the bisection does not find (nodes not sorted, e.g. an `eru plan` problem's) or
anything that reads every node builds the whole dict once, in node order. Equal, item for item and in order, to
`dict(zip(names, capacities))` (tests/unit/planning/test_capacity_map.py).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from operator import attrgetter
from typing import Protocol

from eru.planning.resources import NodeResources

_NAME, _CAPACITY = attrgetter("name"), attrgetter("capacity")


class _Analysed(Protocol):
    @property
    def capacity(self) -> int: ...


class NodeCapacities(Mapping[str, int]):
    """node name → capacity, in node order, over `nodes` and their `analyses` (the same length, the same order)."""

    __slots__ = ("_all", "_analyses", "_nodes", "_seen")

    def __init__(self, nodes: Sequence[NodeResources], analyses: Sequence[_Analysed]) -> None:
        if len(nodes) != len(analyses):
            raise ValueError(f"{len(nodes)} nodes but {len(analyses)} analyses")
        self._nodes = nodes
        self._analyses = analyses
        self._all: dict[str, int] | None = None  # every node's, once something read them all
        self._seen: dict[str, int] = {}  # the nodes looked up by name so far

    def __getitem__(self, name: str) -> int:
        if self._all is not None:
            return self._all[name]
        seen = self._seen.get(name)
        if seen is not None:
            return seen
        nodes = self._nodes
        if type(name) is str:
            at = bisect_left(nodes, name, key=_NAME)
            if at < len(nodes) and nodes[at].name == name:  # names are unique: this is the node of that name
                capacity: int = self._analyses[at].capacity
                self._seen[name] = capacity
                return capacity
        return self._every()[name]  # not found by bisection: the nodes may not be sorted

    def __iter__(self) -> Iterator[str]:
        return iter(self._every())

    def __len__(self) -> int:
        return len(self._nodes)

    def _every(self) -> dict[str, int]:
        if self._all is None:
            self._all = dict(zip(map(_NAME, self._nodes), map(_CAPACITY, self._analyses), strict=True))
        return self._all


__all__ = ["NodeCapacities"]
