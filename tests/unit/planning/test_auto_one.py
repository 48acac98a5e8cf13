"""Mode `auto` for one instance (docs/placement-modes.md): its direct path gives what water filling gives for a
count of 1 — same node, same failures — on pods with ties, full nodes and `nodes_limit`."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eru.errors import PlanningFailure
from eru.planning.modes import NodeSlot, PlacementRequest, SlotArrays, place
from eru.planning.modes.arrays import per_node_room
from eru.planning.modes.auto import _one, _water_fill

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
