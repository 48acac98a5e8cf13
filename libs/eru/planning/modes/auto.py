"""`auto` (the default mode): level the nodes' instance counts up by water filling (docs/placement-modes.md).

One instance at a time, the next goes to the node with the fewest instances (old + new so far) that still has room;
among equal counts the one with more remaining capacity (capacity − new so far), then input order. `nodes_limit` > 0
caps old + new per node.

That one-at-a-time rule is computed without stepping through instances: after the greedy has placed S(h) instances,
where S(h) = Σ clamp(h − count, 0, room), every node stands exactly at min(max(h, count), count + room) (the greedy
never lifts a node above level h while another node with room is below h). So the largest level h with S(h) ≤ count is
found by bisection, and the remaining count − S(h) instances go one each to the nodes standing at h with room left,
which the greedy would take in order of remaining capacity (capacity + count − h, descending), then input order.
"""

from __future__ import annotations

import numpy as np

from eru.planning.modes.arrays import (
    IntArray,
    SlotArrays,
    check_request,
    insufficient_room,
    per_node_room,
    register_array_mode,
)
from eru.planning.modes.base import PlacementRequest


def _placed_up_to(level: int, count: IntArray, room: IntArray) -> IntArray:
    """New instances per node once every node has been filled to `level` (within its room)."""
    return np.minimum(np.maximum(level - count, 0), room)


@register_array_mode("auto")
def auto(nodes: SlotArrays, request: PlacementRequest) -> dict[str, int]:
    """Water filling: `request.count` new instances spread to even out old + new per node."""
    check_request(request)
    need = request.count
    if need == 0:
        nodes.check_unique_names()
        return {}
    room = per_node_room(nodes, request.nodes_limit)
    if int(room.sum()) < need:
        raise insufficient_room("auto", nodes, room, request)
    if need == 1:
        return nodes.placement(_one(nodes, room))
    return nodes.placement(_water_fill(nodes, room, need))


def _one(nodes: SlotArrays, room: IntArray) -> IntArray:
    """One instance (a single-container request, the common case): the greedy's first step directly — the node with
    room and the fewest instances, then the most capacity, then input order — which is what `_water_fill` gives for
    a count of 1 (tests/unit/planning/test_auto_one.py), without its bisection."""
    candidates = np.flatnonzero(room > 0)
    existing = nodes.count[candidates]
    tied = candidates[existing == existing.min()]
    added = np.zeros(nodes.size, dtype=np.int64)
    added[tied[int(np.argmax(nodes.capacity[tied]))]] = 1
    return added


def _water_fill(nodes: SlotArrays, room: IntArray, need: int) -> IntArray:
    """New instances per node for `need` ≤ room.sum() instances (see the module doc)."""
    count = nodes.count
    has_room = room > 0
    low = int(count[has_room].min())
    high = int((count + room).max())
    # Invariant: S(low) ≤ need; S(high) > need unless high is the answer.
    if int(_placed_up_to(high, count, room).sum()) <= need:
        low = high
    while high - low > 1:
        middle = (low + high) // 2
        if int(_placed_up_to(middle, count, room).sum()) <= need:
            low = middle
        else:
            high = middle
    added = _placed_up_to(low, count, room)
    remainder = need - int(added.sum())
    if remainder:
        at_level = np.flatnonzero((count + added == low) & (added < room))
        remaining_capacity = (nodes.capacity + count)[at_level]
        chosen = at_level[np.argsort(-remaining_capacity, kind="stable")[:remainder]]
        added = added.copy()
        added[chosen] += 1
    return added
