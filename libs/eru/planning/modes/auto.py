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

from collections.abc import Sequence
from typing import Any

import numpy as np

from eru.planning.modes.arrays import (
    MAX_INSTANCES,
    Column,
    IntArray,
    SlotArrays,
    check_request,
    insufficient_room,
    per_node_room,
    register_array_mode,
    register_quick_path,
)
from eru.planning.modes.base import NodeSlot, PlacementRequest, register_mode


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


@register_mode("auto")
def auto_on_slots(slots: Sequence[NodeSlot], request: PlacementRequest) -> dict[str, int]:
    """`auto` over slots (`eru plan`, a place request that sends slots; columns take `one_on_columns`). One
    instance on well-formed slots is `_one`'s rule read straight off them: building and checking numpy columns cost
    more than the rule itself on a few nodes (~0.1 ms per single-container request, paid by both processes). Anything
    else — more instances, a value the columns would refuse, a repeated name, no room — goes through the columns,
    which give the same answer or the error naming the field (tests/unit/planning/test_auto_one.py)."""
    if request.count == 1 and type(request.nodes_limit) is int and 0 <= request.nodes_limit <= MAX_INSTANCES:
        chosen = _one_on_slots(slots, request.nodes_limit)
        if chosen is not None:
            return {chosen: 1}
    return auto(SlotArrays.from_slots(slots), request)


def _one_on_slots(slots: Sequence[NodeSlot], nodes_limit: int) -> str | None:
    """The node `_one` picks, or None to leave it to the columns (a malformed or repeated slot, no room)."""
    best: NodeSlot | None = None
    best_key = (0, 0)
    names = set()
    for slot in slots:
        capacity, count = slot.capacity, slot.count
        if type(capacity) is not int or type(count) is not int:
            return None
        if not (0 <= capacity <= MAX_INSTANCES and 0 <= count <= MAX_INSTANCES):
            return None
        if type(slot.name) is not str or not slot.name or slot.name in names:  # the columns' name checks decide
            return None
        names.add(slot.name)
        room = capacity if nodes_limit == 0 else min(max(nodes_limit - count, 0), capacity)
        if room > 0 and (best is None or (-count, capacity) > best_key):  # fewest instances, then most capacity
            best, best_key = slot, (-count, capacity)
    return None if best is None else best.name


@register_quick_path("auto")
def one_on_columns(
    names: Sequence[Any], capacity: Column, count: Column | None, request: PlacementRequest
) -> dict[str, int] | None:
    """One instance (what the allocator's prediction and the distributor ask for every single-container request)
    read straight off plain lists: `_one`'s rule — the node with room and the fewest instances, then the most
    capacity, then input order. Building and checking numpy columns costs more than the rule itself on a few nodes
    (~0.03 ms of ~0.04 ms per request, paid by both processes). None — then the columns decide, with the same
    answer or the error naming the field (tests/unit/planning/test_auto_one.py) — for anything else: more
    instances, a value the columns would refuse, a repeated name, columns of other lengths or types, no room."""
    nodes_limit = request.nodes_limit
    if request.count != 1 or type(request.count) is not int or type(nodes_limit) is not int:
        return None
    if not 0 <= nodes_limit <= MAX_INSTANCES or not isinstance(names, list | tuple):
        return None
    if not isinstance(capacity, list | tuple) or len(capacity) != len(names):
        return None
    if not isinstance(count, list | tuple) or len(count) != len(names):  # None: the arrays say auto needs it
        return None
    best: str | None = None
    best_key = (0, 0)
    seen = set()
    for name, room_of, held in zip(names, capacity, count, strict=True):
        if type(room_of) is not int or type(held) is not int:
            return None
        if not (0 <= room_of <= MAX_INSTANCES and 0 <= held <= MAX_INSTANCES):
            return None
        if type(name) is not str or not name or name in seen:  # the columns' name checks decide
            return None
        seen.add(name)
        room = room_of if nodes_limit == 0 else min(max(nodes_limit - held, 0), room_of)
        if room > 0 and (best is None or (-held, room_of) > best_key):  # fewest instances, then most capacity
            best, best_key = name, (-held, room_of)
    return None if best is None else {best: 1}
