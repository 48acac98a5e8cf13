"""Mode `auto` for one instance (docs/placement-modes.md): its direct path gives what water filling gives for a
count of 1 — same node, same failures — on pods with ties, full nodes and `nodes_limit`."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eru.errors import InvalidInput, PlanningFailure
from eru.planning.distribute import SlotColumns, place_columns
from eru.planning.modes import NodeSlot, PlacementRequest, SlotArrays, place
from eru.planning.modes.arrays import per_node_room, place_arrays
from eru.planning.modes.auto import _one, _water_fill, auto, one_on_columns

SLOTS = st.lists(
    st.tuples(st.integers(0, 6), st.integers(0, 5)).map(lambda pair: NodeSlot("", pair[0], pair[1])),
    min_size=1,
    max_size=12,
).map(lambda slots: [NodeSlot(f"n{i}", s.capacity, s.count) for i, s in enumerate(slots)])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SLOTS, st.sampled_from([0, 0, 1, 2, 3, 5]))
def test_one_instance_goes_where_water_filling_puts_it(slots: list[NodeSlot], nodes_limit: int) -> None:
    nodes = SlotArrays.from_slots(slots)
    room = per_node_room(nodes, nodes_limit)
    if int(room.sum()) < 1:
        with pytest.raises(PlanningFailure):
            place("auto", slots, PlacementRequest(1, nodes_limit))
        return
    assert _one(nodes, room).tolist() == _water_fill(nodes, room, 1).tolist()


def test_ties_go_to_the_most_capacity_then_input_order() -> None:
    slots = [NodeSlot("a", 3, 1), NodeSlot("b", 5, 0), NodeSlot("c", 5, 0), NodeSlot("d", 9, 2)]
    assert place("auto", slots, PlacementRequest(1)) == {"b": 1}
    assert place("auto", slots, PlacementRequest(1, nodes_limit=2)) == {"b": 1}
    full = [NodeSlot("a", 0, 0), NodeSlot("b", 2, 4)]
    assert place("auto", full, PlacementRequest(1)) == {"b": 1}  # the only node with room, however many it holds


ODD_SLOTS = st.lists(
    st.tuples(
        st.sampled_from(["n0", "n1", "n2", "n3", "n4", "n5", ""]),
        st.one_of(st.integers(-1, 6), st.just(True), st.just(2.0)),
        st.one_of(st.integers(-1, 5), st.just(False)),
    ).map(lambda t: NodeSlot(t[0], t[1], t[2])),  # type: ignore[arg-type]  # malformed on purpose
    min_size=0,
    max_size=8,
)


def _answer(run: object) -> object:
    try:
        return run()  # type: ignore[operator]
    except (PlanningFailure, InvalidInput) as error:
        return (type(error).__name__, error.message, error.details)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(SLOTS, ODD_SLOTS), st.sampled_from([0, 0, 1, 2, 3, 5]))
def test_one_instance_read_off_the_slots_is_the_columns_answer(slots: list[NodeSlot], nodes_limit: int) -> None:
    """The slot path for one instance (`auto_on_slots`) against the columns (`auto` over `SlotArrays`): the same
    node, or the same error naming the same field — repeated names, booleans, floats, negatives and no room
    included."""
    request = PlacementRequest(1, nodes_limit)
    by_slots = _answer(lambda: place("auto", slots, request))
    by_columns = _answer(lambda: auto(SlotArrays.from_slots(slots), request))
    assert by_slots == by_columns


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(SLOTS, ODD_SLOTS), st.sampled_from([0, 0, 1, 2, 3, 5]), st.booleans())
def test_one_instance_read_off_plain_columns_is_the_arrays_answer(
    slots: list[NodeSlot], nodes_limit: int, counted: bool
) -> None:
    """The quick path of `place_arrays` for one instance (`one_on_columns`: what the allocator's prediction and the
    distributor run for a single-container request) against the arrays: the same node, or the same error naming the
    same field."""
    request = PlacementRequest(1, nodes_limit)
    names = [slot.name for slot in slots]
    capacity = [slot.capacity for slot in slots]
    count = [slot.count for slot in slots] if counted else None
    quick = _answer(lambda: place_arrays("auto", names, capacity, count, None, None, request))
    arrays = _answer(lambda: auto(SlotArrays.from_columns(names, capacity, count, None, None), request))
    assert quick == arrays


def test_the_quick_path_answers_one_instance_on_plain_columns() -> None:
    """`place_arrays` answers from `one_on_columns` (the arrays are never built) for one instance on well-formed
    lists, and leaves anything else to the arrays."""
    request = PlacementRequest(1)
    assert one_on_columns(["a", "b", "c"], [3, 5, 5], [1, 0, 0], request) == {"b": 1}
    assert one_on_columns(["a", "b"], [3, 5], None, request) is None  # no counts: the arrays' error names them
    assert one_on_columns(["a", "a"], [3, 5], [0, 0], request) is None  # repeated name: the arrays name the field
    assert one_on_columns(["a", "b"], [3, 5], [0, 0], PlacementRequest(2)) is None
    assert one_on_columns(["a", "b"], [0, 0], [0, 0], request) is None  # no room: the arrays' failure
    assert place_arrays("auto", ["a", "b", "c"], [3, 5, 5], [1, 0, 0], None, None, request) == {"b": 1}


def test_one_instance_on_plain_columns_builds_no_arrays(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the allocator's prediction and the distributor run for a single-container request (`place_columns` over
    plain lists) never builds numpy columns: they had cost ~5× the rule itself on 16 nodes."""

    def refuse(*args: object, **kwargs: object) -> SlotArrays:
        raise AssertionError("numpy columns built for one instance")

    monkeypatch.setattr(SlotArrays, "from_columns", refuse)
    columns = SlotColumns(["a", "b", "c"], [3, 5, 5], [1, 0, 0], None, None)
    assert place_columns("auto", columns, 1, 0, {}) == {"b": 1}
    assert place_columns("auto", columns, 1, 1, {}) == {"b": 1}
