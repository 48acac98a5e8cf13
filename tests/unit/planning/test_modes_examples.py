"""Placement modes on the seed's worked examples (docs/placement-modes.md), their failures with numbers, and malformed
input."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from eru.errors import InvalidInput, PlanningFailure
from eru.planning.modes import NodeSlot, PlacementRequest, SlotArrays, mode_names, place, place_arrays, register_mode

BUILT_IN = ["auto", "each", "fill", "global", "drained"]


def slots_from(spec: str) -> list[NodeSlot]:
    """'A:10:2 B:5:3' → slots named A, B with capacity (free) 10, 5 and existing count 2, 3 (the seed's notation)."""
    result = []
    for item in spec.split():
        name, free, existing = item.split(":")
        result.append(NodeSlot(name, int(free), int(existing)))
    return result


def test_every_built_in_mode_is_registered() -> None:
    assert set(BUILT_IN) <= set(mode_names())


# auto: existing A:3 B:1 C:5 D:4, capacity A:10 B:13 C:7 D:2.
AUTO_SEED = [NodeSlot("A", 10, 3), NodeSlot("B", 13, 1), NodeSlot("C", 7, 5), NodeSlot("D", 2, 4)]


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        (2, {"B": 2}),  # round 1: B+2 → B:3 A:3 D:4 C:5
        (4, {"B": 3, "A": 1}),  # round 2: B, A +1 → 4 4 4 5
        (7, {"B": 4, "A": 2, "D": 1}),  # round 3: B, A, D +1 → all at 5
        (11, {"B": 5, "A": 3, "D": 2, "C": 1}),  # round 4: all +1 → all at 6
    ],
)
def test_auto_seed_rounds_level_every_node(count: int, expected: dict[str, int]) -> None:
    assert place("auto", AUTO_SEED, PlacementRequest(count)) == expected


def test_auto_seed_beyond_eleven_d_is_full_and_a_b_c_level_on() -> None:
    placed = place("auto", AUTO_SEED, PlacementRequest(11 + 3 * 4))
    assert placed == {"A": 7, "B": 9, "C": 5, "D": 2}
    assert {name: placed[name] + slot.count for name, slot in zip("ABCD", AUTO_SEED, strict=True)} == {
        "A": 10,
        "B": 10,
        "C": 10,
        "D": 6,
    }


def test_auto_within_a_round_breaks_ties_by_remaining_capacity() -> None:
    # After B+2 the level is 3 for A (capacity 10) and B (13 − 2 = 11 left): B, with more room, goes first.
    assert place("auto", AUTO_SEED, PlacementRequest(3)) == {"B": 3}


def test_auto_then_input_order_on_full_ties() -> None:
    slots = [NodeSlot("x", 5), NodeSlot("y", 5), NodeSlot("z", 5)]
    assert place("auto", slots, PlacementRequest(2)) == {"x": 1, "y": 1}


def test_auto_nodes_limit_caps_old_plus_new() -> None:
    # Room under the limit: A 3, B 5, C 1, D 2. Seven instances bring all to 5; the eighth goes to B (most room).
    assert place("auto", AUTO_SEED, PlacementRequest(8, nodes_limit=6)) == {"A": 2, "B": 5, "D": 1}
    assert place("auto", AUTO_SEED, PlacementRequest(11, nodes_limit=6)) == {"A": 3, "B": 5, "C": 1, "D": 2}
    with pytest.raises(PlanningFailure) as caught:
        place("auto", AUTO_SEED, PlacementRequest(12, nodes_limit=6))
    error = caught.value
    assert error.code == "nodes_limit_reached"
    assert error.details["need"] == 12
    assert error.details["available"] == 11
    assert error.details["per_node"]["C"] == {"capacity": 7, "existing": 5, "available": 1}


def test_auto_insufficient_capacity_gives_numbers() -> None:
    with pytest.raises(PlanningFailure) as caught:
        place("auto", AUTO_SEED, PlacementRequest(33))
    error = caught.value
    assert error.code == "insufficient_capacity"
    assert (error.details["need"], error.details["available"]) == (33, 32)
    assert error.details["per_node"]["D"] == {"capacity": 2, "existing": 4, "available": 2}
    assert "33" in error.message
    assert "32" in error.message


# each: capacity A:5 B:3 C:7 D:4.
EACH_SEED = [NodeSlot("A", 5), NodeSlot("B", 3), NodeSlot("C", 7), NodeSlot("D", 4)]


def test_each_seed_count_three_on_all_four_nodes() -> None:
    placed = place("each", EACH_SEED, PlacementRequest(3))
    assert placed == {"A": 3, "B": 3, "C": 3, "D": 3}
    assert sum(placed.values()) == 12


def test_each_seed_count_five_only_a_and_c() -> None:
    assert place("each", EACH_SEED, PlacementRequest(5)) == {"A": 5, "C": 5}


def test_each_nodes_limit_takes_the_roomiest() -> None:
    assert place("each", EACH_SEED, PlacementRequest(3, nodes_limit=2)) == {"A": 3, "C": 3}
    with pytest.raises(PlanningFailure) as caught:
        place("each", EACH_SEED, PlacementRequest(5, nodes_limit=3))
    error = caught.value
    assert error.code == "not_enough_nodes"
    assert (error.details["nodes_needed"], error.details["nodes_qualifying"]) == (3, 2)
    assert error.details["per_node"] == {"B": {"capacity": 3, "needed": 5}, "D": {"capacity": 4, "needed": 5}}


def test_each_with_no_qualifying_node_fails() -> None:
    with pytest.raises(PlanningFailure) as caught:
        place("each", EACH_SEED, PlacementRequest(8))
    assert caught.value.code == "not_enough_nodes"
    assert caught.value.details["nodes_qualifying"] == 0


# fill: node:free:existing.
@pytest.mark.parametrize(
    ("spec", "target", "expected"),
    [
        ("A:10:2 B:10:3 C:10:5 D:10:7", 10, {"A": 8, "B": 7, "C": 5, "D": 3}),
        ("A:10:2 B:10:3 C:10:5 D:10:7", 5, {"A": 3, "B": 2}),
        ("A:10:2 B:5:3 C:7:4 D:9:5", 4, {"A": 2, "B": 1}),
    ],
)
def test_fill_seed_examples(spec: str, target: int, expected: dict[str, int]) -> None:
    assert place("fill", slots_from(spec), PlacementRequest(target)) == expected


def test_fill_seed_unreachable_fails_whole_even_though_a_fits() -> None:
    with pytest.raises(PlanningFailure) as caught:
        place("fill", slots_from("A:3:5 B:1:5 C:1:5 D:1:5"), PlacementRequest(7))
    error = caught.value
    assert error.code == "fill_unreachable"
    assert error.details["per_node"] == {name: {"capacity": 1, "existing": 5, "needed": 2} for name in ("B", "C", "D")}
    assert (error.details["need"], error.details["available"]) == (8, 5)


def test_fill_already_filled_is_distinct() -> None:
    with pytest.raises(PlanningFailure) as caught:
        place("fill", slots_from("A:10:5 B:0:7"), PlacementRequest(5))
    assert caught.value.code == "already_filled"


def test_fill_nodes_limit_picks_most_existing_then_most_capacity() -> None:
    slots = slots_from("A:10:2 B:1:4 C:7:4 D:9:3")
    # Reach 5: all can; order by existing, then capacity: C (4, cap 7), B (4, cap 1), D, A.
    assert place("fill", slots, PlacementRequest(5, nodes_limit=2)) == {"B": 1, "C": 1}
    # Reach 6: B cannot reach it, so C then D.
    assert place("fill", slots, PlacementRequest(6, nodes_limit=2)) == {"C": 2, "D": 3}
    with pytest.raises(PlanningFailure) as caught:
        place("fill", slots, PlacementRequest(12, nodes_limit=3))  # only A (2 + 10) and D (3 + 9) reach 12
    assert caught.value.code == "not_enough_nodes"
    assert caught.value.details["nodes_qualifying"] == 2


def test_fill_nodes_limit_counts_nodes_already_filled() -> None:
    slots = slots_from("A:10:2 B:0:9 C:10:1")
    with pytest.raises(PlanningFailure) as caught:
        place("fill", slots, PlacementRequest(5, nodes_limit=1))  # B (9 existing) comes first and is filled
    assert caught.value.code == "already_filled"
    assert place("fill", slots, PlacementRequest(5, nodes_limit=2)) == {"A": 3}


def test_global_goes_to_lowest_usage_after_placing() -> None:
    slots = [NodeSlot("a", 5, 0, 0.30, 0.10), NodeSlot("b", 5, 0, 0.10, 0.10), NodeSlot("c", 5, 0, 0.45, 0.01)]
    # b: .2 .3 .4 …; a: .4 .5 …; c: .46 .47 …
    assert place("global", slots, PlacementRequest(2)) == {"b": 2}
    assert place("global", slots, PlacementRequest(4)) == {"a": 1, "b": 3}
    assert place("global", slots, PlacementRequest(6)) == {"a": 1, "b": 3, "c": 2}


def test_global_compares_usage_exactly_as_computed() -> None:
    # 0.2 + 1·0.1 = 0.30000000000000004 > 0.3 = 0.0 + 1·0.3: b is lower, by one ulp.
    slots = [NodeSlot("a", 3, 0, 0.2, 0.1), NodeSlot("b", 3, 0, 0.0, 0.3)]
    assert place("global", slots, PlacementRequest(1)) == {"b": 1}
    # c's 0.3 is one ulp below the others' 0.30000000000000004: it goes first, then input order among the equal two.
    slots = [
        NodeSlot("a", 1, 0, 0.2, 0.1),
        NodeSlot("b", 1, 0, 0.0, 0.30000000000000004),
        NodeSlot("c", 1, 0, 0.0, 0.3),
    ]
    assert place("global", slots, PlacementRequest(2)) == {"a": 1, "c": 1}
    # Equal after rounding: 0.5 + k·1e-17 == 0.5 for every k, so input order decides, a first to its capacity.
    slots = [NodeSlot("b", 3, 0, 0.5, 1e-17), NodeSlot("a", 3, 0, 0.5, 0.0)]
    assert place("global", slots, PlacementRequest(4)) == {"b": 3, "a": 1}


def test_drained_packs_least_capacity_first_then_highest_usage() -> None:
    slots = [NodeSlot("a", 4, 0, 0.2), NodeSlot("b", 2, 0, 0.1), NodeSlot("c", 4, 0, 0.6), NodeSlot("d", 0, 0, 0.9)]
    assert place("drained", slots, PlacementRequest(5)) == {"b": 2, "c": 3}
    assert place("drained", slots, PlacementRequest(10)) == {"a": 4, "b": 2, "c": 4}


@pytest.mark.parametrize("mode", ["auto", "global", "drained"])
def test_spreading_modes_report_the_shortfall(mode: str) -> None:
    slots = [NodeSlot("a", 2, 0, 0.1, 0.1), NodeSlot("b", 1, 0, 0.1, 0.1)]
    with pytest.raises(PlanningFailure) as caught:
        place(mode, slots, PlacementRequest(4))
    assert caught.value.code == "insufficient_capacity"
    assert caught.value.to_dict()["need"] == 4
    assert caught.value.to_dict()["available"] == 3


@pytest.mark.parametrize("mode", ["auto", "each", "global", "drained"])
def test_zero_instances_places_nothing(mode: str) -> None:
    assert place(mode, [NodeSlot("a", 3, 1, 0.1, 0.1)], PlacementRequest(0)) == {}


MALFORMED_SLOTS = [
    ([NodeSlot("a", -1)], "nodes[0].capacity", BUILT_IN),
    ([NodeSlot("a", 1), NodeSlot("b", 1, -2)], "nodes[1].count", ["auto", "fill"]),  # the modes that always read count
    ([NodeSlot("a", 1), NodeSlot("a", 2)], "nodes[1].name", BUILT_IN),
    ([NodeSlot("a", 1), NodeSlot("", 2)], "nodes[1].name", BUILT_IN),
    ([NodeSlot("a", 1), NodeSlot("b", 2.5)], "nodes[1].capacity", BUILT_IN),  # type: ignore[arg-type]
    ([NodeSlot("a", 1, 0, -0.1)], "nodes[0].usage", ["global", "drained"]),  # the modes that read usage
    ([NodeSlot("a", 1, 0, 0.1, float("nan"))], "nodes[0].rate", ["global"]),  # the mode that reads rate
]


@pytest.mark.parametrize(
    ("mode", "slots", "field"),
    [(mode, slots, field) for slots, field, modes in MALFORMED_SLOTS for mode in modes],
)
def test_malformed_slots_name_the_field(mode: str, slots: list[NodeSlot], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        place(mode, slots, PlacementRequest(1))
    assert caught.value.field == field


@pytest.mark.parametrize("mode", ["global", "drained"])
def test_count_is_read_and_checked_when_nodes_limit_applies(mode: str) -> None:
    slots = [NodeSlot("a", 3, 0, 0.1, 0.1), NodeSlot("b", 3, -1, 0.1, 0.1)]
    assert place(mode, slots, PlacementRequest(1)) == {"a": 1}  # without a limit the count is not read
    with pytest.raises(InvalidInput) as caught:
        place(mode, slots, PlacementRequest(1, nodes_limit=2))
    assert caught.value.field == "nodes[1].count"


def test_validate_all_checks_columns_no_mode_reads() -> None:
    nodes = SlotArrays.from_slots([NodeSlot("a", 3, -1, 0.1, 0.1)])
    with pytest.raises(InvalidInput) as caught:
        nodes.validate_all()
    assert caught.value.field == "nodes[0].count"


@pytest.mark.parametrize("mode", BUILT_IN)
def test_duplicate_names_are_caught_whatever_the_outcome(mode: str) -> None:
    # Every node in the answer, some in it, none (zero instances), or a failure: always the same InvalidInput.
    for count in (1, 2, 0, 50):
        with pytest.raises(InvalidInput) as caught:
            place(mode, [NodeSlot("a", 2, 0, 0.5, 0.1), NodeSlot("a", 2, 0, 0.1, 0.1)], PlacementRequest(count))
        assert caught.value.field == "nodes[1].name"


@pytest.mark.parametrize("mode", BUILT_IN)
def test_malformed_request_names_the_field(mode: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        place(mode, [NodeSlot("a", 1)], PlacementRequest(-1))
    assert caught.value.field == "count"
    with pytest.raises(InvalidInput) as caught:
        place(mode, [NodeSlot("a", 1)], PlacementRequest(1, nodes_limit=-3))
    assert caught.value.field == "nodes_limit"


def test_unknown_mode_is_invalid_input() -> None:
    with pytest.raises(InvalidInput) as caught:
        place("spread", [NodeSlot("a", 1)], PlacementRequest(1))
    assert caught.value.field == "mode"


@pytest.mark.parametrize("mode", BUILT_IN)
def test_place_arrays_equals_place(mode: str) -> None:
    slots = [NodeSlot(f"n{i}", 3 + (i * 7) % 11, (i * 5) % 4, (i % 9) / 10, 0.01 + (i % 3) / 100) for i in range(40)]
    request = PlacementRequest(3 if mode in ("each", "fill") else 60)
    expected = place(mode, slots, request)
    got = place_arrays(
        mode,
        [s.name for s in slots],
        np.array([s.capacity for s in slots]),
        [s.count for s in slots],
        np.array([s.usage for s in slots]),
        [s.rate for s in slots],
        request,
    )
    assert got == expected
    assert all(type(n) is int for n in got.values())


def test_place_arrays_rejects_columns_of_the_wrong_length() -> None:
    with pytest.raises(InvalidInput) as caught:
        place_arrays("auto", ["a", "b"], [1, 2, 3], [0, 0], None, None, PlacementRequest(1))
    assert caught.value.field == "capacity"


def test_global_through_place_arrays_needs_usage() -> None:
    with pytest.raises(InvalidInput) as caught:
        place_arrays("global", ["a"], [1], [0], None, [0.1], PlacementRequest(1))
    assert caught.value.field == "usage"


def test_each_through_place_arrays_needs_no_count() -> None:
    assert place_arrays("each", ["a", "b"], [1, 2], None, None, None, PlacementRequest(2)) == {"b": 2}


def test_place_arrays_serves_modes_registered_on_slots_only() -> None:
    @register_mode("test-first-with-room")
    def first_with_room(slots: Sequence[NodeSlot], request: PlacementRequest) -> dict[str, int]:
        return {next(slot.name for slot in slots if slot.capacity >= request.count): request.count}

    assert place_arrays("test-first-with-room", ["a", "b"], [1, 5], None, None, None, PlacementRequest(3)) == {"b": 3}


def test_slot_arrays_are_read_only() -> None:
    nodes = SlotArrays.from_slots([NodeSlot("a", 1, 0, 0.5, 0.1)])
    for column in (nodes.capacity, nodes.count, nodes.usage, nodes.rate):
        assert not column.flags.writeable
