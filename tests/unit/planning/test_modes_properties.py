"""Property tests: every fast mode equals a one-instance-at-a-time reference, and the invariants of
docs/placement-modes.md hold."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from eru.errors import PlanningFailure
from eru.planning.modes import NodeSlot, PlacementRequest, SlotArrays, place
from eru.planning.modes.global_ import placement_by_lowest_usage

PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Values chosen so that usage + k·rate ties often, including ties that exist only after float rounding.
USAGES = st.one_of(
    st.sampled_from([0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 0.30000000000000004]),
    st.floats(0.0, 2.0, allow_nan=False, allow_infinity=False),
)
RATES = st.one_of(
    st.sampled_from([0.0, 0.1, 0.05, 0.2, 0.3, 1e-17, 5e-324, 0.25]),
    st.floats(0.0, 1.0, allow_nan=False, allow_infinity=False),
)


@st.composite
def pods(draw: st.DrawFn, max_nodes: int = 8) -> list[NodeSlot]:
    size = draw(st.integers(0, max_nodes))
    return [
        NodeSlot(
            f"n{index}",
            draw(st.integers(0, 12)),
            draw(st.integers(0, 10)),
            draw(USAGES),
            draw(RATES),
        )
        for index in range(size)
    ]


REQUESTS = st.builds(PlacementRequest, st.integers(0, 40), st.sampled_from([0, 0, 1, 2, 3, 5, 8, 12]))


# ---- references: one instance at a time, straight from the words of docs/placement-modes.md --------------------------


def room_of(slot: NodeSlot, nodes_limit: int) -> int:
    if nodes_limit == 0:
        return slot.capacity
    return max(0, min(slot.capacity, nodes_limit - slot.count))


def one_at_a_time(
    slots: list[NodeSlot], request: PlacementRequest, key: Callable[[int, int], tuple[float, ...]]
) -> dict[str, int]:
    """Place `request.count` instances one by one, each on the node with room whose key(index, added) is smallest."""
    room = [room_of(slot, request.nodes_limit) for slot in slots]
    if sum(room) < request.count:
        raise PlanningFailure("short", code="short")
    added = [0] * len(slots)
    for _ in range(request.count):
        best = min((i for i in range(len(slots)) if added[i] < room[i]), key=lambda i: key(i, added[i]))
        added[best] += 1
    return {slot.name: n for slot, n in zip(slots, added, strict=True) if n}


def auto_reference(slots: list[NodeSlot], request: PlacementRequest) -> dict[str, int]:
    return one_at_a_time(slots, request, lambda i, added: (slots[i].count + added, -(slots[i].capacity - added), i))


def global_reference(slots: list[NodeSlot], request: PlacementRequest) -> dict[str, int]:
    return one_at_a_time(slots, request, lambda i, added: (slots[i].usage + (added + 1) * slots[i].rate, i))


def drained_reference(slots: list[NodeSlot], request: PlacementRequest) -> dict[str, int]:
    order = sorted(range(len(slots)), key=lambda i: (room_of(slots[i], request.nodes_limit), -slots[i].usage, i))
    rank = {node: position for position, node in enumerate(order)}
    return one_at_a_time(slots, request, lambda i, added: (rank[i],))


def each_reference(slots: list[NodeSlot], request: PlacementRequest) -> dict[str, int]:
    if request.count == 0:
        return {}
    qualifying = [i for i, slot in enumerate(slots) if slot.capacity >= request.count]
    if len(qualifying) < max(request.nodes_limit, 1):
        raise PlanningFailure("short", code="not_enough_nodes")
    if request.nodes_limit:
        qualifying = sorted(sorted(qualifying, key=lambda i: (-slots[i].capacity, i))[: request.nodes_limit])
    return {slots[i].name: request.count for i in qualifying}


def fill_reference(slots: list[NodeSlot], request: PlacementRequest) -> dict[str, int]:
    target = request.count
    considered = list(range(len(slots)))
    if request.nodes_limit:
        reachable = [i for i in considered if slots[i].count + slots[i].capacity >= target]
        if len(reachable) < request.nodes_limit:
            raise PlanningFailure("short", code="not_enough_nodes")
        considered = sorted(
            sorted(reachable, key=lambda i: (-slots[i].count, -slots[i].capacity, i))[: request.nodes_limit]
        )
    result = {}
    for i in considered:
        if slots[i].count < target:
            if slots[i].count + slots[i].capacity < target:
                raise PlanningFailure("short", code="fill_unreachable")
            result[slots[i].name] = target - slots[i].count
    if not result:
        raise PlanningFailure("nothing", code="already_filled")
    return result


REFERENCES = {
    "auto": auto_reference,
    "global": global_reference,
    "drained": drained_reference,
    "each": each_reference,
    "fill": fill_reference,
}


def outcome(run: Callable[[], dict[str, int]]) -> dict[str, int] | str:
    """The placement, or the failure's kind (the references do not tell the spreading modes' two codes apart)."""
    try:
        return run()
    except PlanningFailure as failure:
        return "short" if failure.code in ("insufficient_capacity", "nodes_limit_reached") else failure.code


# ---- fast == reference ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", sorted(REFERENCES))
@PROPERTY_SETTINGS
@given(slots=pods(), request=REQUESTS)
@example(slots=[NodeSlot("a", 3, 0, 0.2, 0.1), NodeSlot("b", 3, 0, 0.0, 0.3)], request=PlacementRequest(2))
def test_fast_mode_equals_one_at_a_time_reference(mode: str, slots: list[NodeSlot], request: PlacementRequest) -> None:
    fast = outcome(lambda: place(mode, slots, request))
    assert fast == outcome(lambda: REFERENCES[mode](slots, request))
    assert fast == outcome(lambda: place(mode, slots, request))  # deterministic
    if isinstance(fast, dict):
        assert list(fast) == [slot.name for slot in slots if slot.name in fast]  # listed in input order


@pytest.mark.parametrize("mode", ["auto", "global", "drained"])
@settings(max_examples=30, deadline=None)
@given(slots=pods(max_nodes=40), request=st.builds(PlacementRequest, st.integers(1, 300), st.sampled_from([0, 6])))
def test_fast_equals_reference_on_bigger_pods(mode: str, slots: list[NodeSlot], request: PlacementRequest) -> None:
    assert outcome(lambda: place(mode, slots, request)) == outcome(lambda: REFERENCES[mode](slots, request))


@settings(max_examples=60, deadline=None)
@given(slots=pods(max_nodes=40), request=st.builds(PlacementRequest, st.integers(1, 300), st.just(0)))
@example(
    slots=[NodeSlot("a", 9, 0, 0.5, 1e-17), NodeSlot("b", 9, 0, 0.5, 0.0), NodeSlot("c", 9, 0, 0.5, 5e-324)],
    request=PlacementRequest(14),
)
@example(slots=[NodeSlot(f"n{i}", 12, 0, 0.1 * (i % 3), 0.1) for i in range(30)], request=PlacementRequest(200))
def test_global_bisection_alone_equals_reference(slots: list[NodeSlot], request: PlacementRequest) -> None:
    """With no enumeration at the end, the threshold comes from bisection down to adjacent floats."""
    nodes = SlotArrays.from_slots(slots)
    expected = outcome(lambda: global_reference(slots, request))
    for limit in (0, 3, 10**9):
        assert outcome(functools.partial(placement_by_lowest_usage, nodes, request, enumerate_limit=limit)) == expected


# ---- invariants ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "global", "drained"])
@PROPERTY_SETTINGS
@given(slots=pods(), request=REQUESTS)
def test_spreading_modes_place_exactly_count_within_room(
    mode: str, slots: list[NodeSlot], request: PlacementRequest
) -> None:
    room = {slot.name: room_of(slot, request.nodes_limit) for slot in slots}
    try:
        placed = place(mode, slots, request)
    except PlanningFailure as failure:
        details = failure.details
    else:
        assert sum(placed.values()) == request.count
        assert all(0 < n <= room[name] for name, n in placed.items())
        return
    assert sum(room.values()) < request.count
    assert details["need"] == request.count
    assert details["available"] == sum(room.values())


@PROPERTY_SETTINGS
@given(slots=pods(), request=REQUESTS)
def test_auto_is_as_even_as_room_allows(slots: list[NodeSlot], request: PlacementRequest) -> None:
    try:
        placed = place("auto", slots, request)
    except PlanningFailure:
        return
    added = [placed.get(slot.name, 0) for slot in slots]
    final = [slot.count + n for slot, n in zip(slots, added, strict=True)]
    for i in range(len(slots)):
        for j in range(len(slots)):
            if added[i] > 0 and final[i] >= final[j] + 2:
                # Moving one new instance from i to j would even things out, so j must have no room left.
                assert added[j] == room_of(slots[j], request.nodes_limit), (i, j, final)


@PROPERTY_SETTINGS
@given(slots=pods(), request=REQUESTS)
def test_global_last_instance_never_worse_than_any_open_node(slots: list[NodeSlot], request: PlacementRequest) -> None:
    try:
        placed = place("global", slots, request)
    except PlanningFailure:
        return
    for giver in slots:
        given_count = placed.get(giver.name, 0)
        if not given_count:
            continue
        last = giver.usage + given_count * giver.rate
        for other in slots:
            other_count = placed.get(other.name, 0)
            if other_count < room_of(other, request.nodes_limit):
                assert last <= other.usage + (other_count + 1) * other.rate


@PROPERTY_SETTINGS
@given(slots=pods(), request=REQUESTS)
def test_drained_fills_in_capacity_order(slots: list[NodeSlot], request: PlacementRequest) -> None:
    try:
        placed = place("drained", slots, request)
    except PlanningFailure:
        return
    order = sorted(range(len(slots)), key=lambda i: (room_of(slots[i], request.nodes_limit), -slots[i].usage, i))
    partial_seen = False
    for i in order:
        got, room = placed.get(slots[i].name, 0), room_of(slots[i], request.nodes_limit)
        if partial_seen:
            assert got == 0
        elif got < room:
            partial_seen = True  # the one node taken part-way; everything after it is untouched


@PROPERTY_SETTINGS
@given(slots=pods(), request=REQUESTS)
def test_each_places_exactly_count_per_chosen_node(slots: list[NodeSlot], request: PlacementRequest) -> None:
    placed = outcome(lambda: place("each", slots, request))
    if isinstance(placed, str):
        assert placed == "not_enough_nodes"
        return
    capacity = {slot.name: slot.capacity for slot in slots}
    assert all(n == request.count <= capacity[name] for name, n in placed.items())
    if request.count and request.nodes_limit:
        assert len(placed) == request.nodes_limit


@PROPERTY_SETTINGS
@given(slots=pods(), request=REQUESTS)
def test_fill_is_all_or_nothing(slots: list[NodeSlot], request: PlacementRequest) -> None:
    placed = outcome(lambda: place("fill", slots, request))
    if isinstance(placed, str):
        assert placed in ("fill_unreachable", "already_filled", "not_enough_nodes")
        return
    by_name = {slot.name: slot for slot in slots}
    assert all(by_name[name].count + n == request.count and n <= by_name[name].capacity for name, n in placed.items())
    if request.nodes_limit == 0:
        assert placed == {slot.name: request.count - slot.count for slot in slots if slot.count < request.count}
