"""`global`: one instance at a time to the node whose usage after placing it is lowest (docs/placement-modes.md).

The k-th new instance on a node brings its usage to `usage + k * rate` (computed exactly like that, in float64 — not by
repeated addition), and ties go to input order. `nodes_limit` > 0 caps old + new instances per node, as in `auto`.

Because rate ≥ 0, each node's sequence of values is non-decreasing (float rounding is monotone), so the one-at-a-time
greedy takes exactly the `count` smallest items of the merged sequences under the key (value, input order): every item
below the count-th smallest value T, then items equal to T node by node in input order. The code finds T without
walking instances: it bisects on the value with an exact per-node count of items ≤ t, until the bracket holds few
enough items to enumerate and select from directly (or cannot shrink: then T is its upper end).
"""

from __future__ import annotations

import numpy as np

from eru.planning.modes.arrays import (
    FloatArray,
    IntArray,
    SlotArrays,
    check_request,
    insufficient_room,
    per_node_room,
    register_array_mode,
)
from eru.planning.modes.base import PlacementRequest

_ARITHMETIC_STEPS = 64
"""Bisection steps at the arithmetic midpoint before switching to the bit-pattern midpoint (which needs at most 64
more steps to reach adjacent floats whatever the magnitudes)."""


def _usage_after(count: IntArray, usage: FloatArray, rate: FloatArray) -> FloatArray:
    """Usage of each node after `count` new instances: the one formula every comparison uses."""
    result: FloatArray = usage + count * rate
    return result


def _items_at_most(threshold: float, usage: FloatArray, rate: FloatArray, room: IntArray) -> IntArray:
    """Per node, how many of its next instances leave its usage ≤ `threshold` (exact, float rounding included)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        estimate = np.where(
            rate > 0, np.floor((threshold - usage) / rate), np.where(usage <= threshold, np.inf, -np.inf)
        )
    counts = np.clip(estimate, 0, room).astype(np.int64)
    too_many = (counts > 0) & (_usage_after(counts, usage, rate) > threshold)
    too_few = (counts < room) & (_usage_after(counts + 1, usage, rate) <= threshold)
    wrong = np.flatnonzero(too_many | too_few)
    if wrong.size:
        counts[wrong] = _items_at_most_by_search(threshold, usage[wrong], rate[wrong], room[wrong])
    return counts


def _items_at_most_by_search(threshold: float, usage: FloatArray, rate: FloatArray, room: IntArray) -> IntArray:
    """Binary search per node; for the rare nodes where the division estimate is off (values collapsed by rounding)."""
    low = np.zeros_like(room)
    high = room.copy()
    while np.any(low < high):
        middle = (low + high + 1) // 2
        fits = _usage_after(middle, usage, rate) <= threshold
        low = np.where(fits, middle, low)
        high = np.where(fits, high, middle - 1)
    return low


def _midpoint(low: float, high: float, step: int) -> float:
    if step < _ARITHMETIC_STEPS:
        return low + (high - low) / 2
    bits = np.array([low, high], dtype=np.float64).view(np.int64)
    return float(np.array([(int(bits[0]) + int(bits[1])) // 2], dtype=np.int64).view(np.float64)[0])


def _threshold(need: int, usage: FloatArray, rate: FloatArray, room: IntArray, enumerate_limit: int) -> float:
    """The `need`-th smallest usage-after value over all nodes' next instances (need ≤ Σ room)."""
    open_nodes = room > 0
    low = float(_usage_after(np.ones(1, dtype=np.int64), usage[open_nodes], rate[open_nodes]).min())
    below_low = _items_at_most(low, usage, rate, room)
    if int(below_low.sum()) >= need:
        return low
    high = float(_usage_after(room[open_nodes], usage[open_nodes], rate[open_nodes]).max())
    below_high = room
    # Invariant: items ≤ low < need ≤ items ≤ high, so the answer lies in (low, high].
    step = 0
    while int(below_high.sum() - below_low.sum()) > enumerate_limit:
        middle = _midpoint(low, high, step)
        step += 1
        if not low < middle < high:
            return high
        below_middle = _items_at_most(middle, usage, rate, room)
        if int(below_middle.sum()) >= need:
            high, below_high = middle, below_middle
        else:
            low, below_low = middle, below_middle
    # Few enough items lie in (low, high]: list their values and select the one of the right rank.
    spans = below_high - below_low
    node_of_item = np.repeat(np.arange(usage.size), spans)
    first_item = np.cumsum(spans) - spans
    instance = below_low[node_of_item] + 1 + (np.arange(node_of_item.size) - first_item[node_of_item])
    values = _usage_after(instance, usage[node_of_item], rate[node_of_item])
    rank = need - int(below_low.sum()) - 1
    return float(np.partition(values, rank)[rank])


@register_array_mode("global")
def global_(nodes: SlotArrays, request: PlacementRequest) -> dict[str, int]:
    """`request.count` instances, each to the node whose usage after it is lowest (ties: input order)."""
    return placement_by_lowest_usage(nodes, request, enumerate_limit=4 * nodes.size + 64)


def placement_by_lowest_usage(nodes: SlotArrays, request: PlacementRequest, *, enumerate_limit: int) -> dict[str, int]:
    """`global` with the bisection's stopping size exposed (tests drive it to 0 to exercise the bisection alone)."""
    check_request(request)
    need = request.count
    if need == 0:
        nodes.check_unique_names()
        return {}
    usage = nodes.usage
    rate = nodes.rate
    room = per_node_room(nodes, request.nodes_limit)
    if int(room.sum()) < need:
        raise insufficient_room("global", nodes, room, request)
    threshold = _threshold(need, usage, rate, room, enumerate_limit)
    below = _items_at_most(float(np.nextafter(threshold, -np.inf)), usage, rate, room)
    at_threshold = _items_at_most(threshold, usage, rate, room) - below
    left = need - int(below.sum())
    taken_before = np.cumsum(at_threshold) - at_threshold
    added = below + np.clip(left - taken_before, 0, at_threshold)
    return nodes.placement(added)
