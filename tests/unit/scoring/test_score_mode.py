"""The `score` placement mode: one at a time on the best node, deterministic ties, options, failures."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scoring_formulas import balanced_formula, least_formula, most_formula, qos_formula

from eru.errors import InvalidInput, PlanningFailure
from eru.planning.modes import NodeSlot, PlacementRequest, mode_names, place, place_arrays
from eru.planning.scorers import QOS_CLASSES, NodeLoad, merge_weights, score_options

GIB = 1 << 30


def test_score_is_registered() -> None:
    assert "score" in mode_names()


def test_least_allocated_spreads_and_most_allocated_packs() -> None:
    slots = [NodeSlot("a", 10), NodeSlot("b", 10)]
    nodes = {"a": NodeLoad({"cpu": 800, "memory": 8 * GIB}), "b": NodeLoad({"cpu": 800, "memory": 8 * GIB})}
    request = {"cpu": 100, "memory": GIB}
    spread = place("score", slots, PlacementRequest(4, options=score_options(request=request, nodes=nodes)))
    assert spread == {"a": 2, "b": 2}
    packed = place(
        "score",
        slots,
        PlacementRequest(4, options=score_options(request=request, nodes=nodes, scorers={"most-allocated": 1})),
    )
    assert packed == {"a": 4}  # ties go to input order, then a stays the fullest


def test_ties_go_to_input_order() -> None:
    slots = [NodeSlot(name, 1) for name in "cab"]
    assert place("score", slots, PlacementRequest(1)) == {"c": 1}


def test_capacity_filter_and_nodes_limit() -> None:
    slots = [NodeSlot("a", 1, usage=0.0, rate=0.01), NodeSlot("b", 5, count=2, usage=0.5, rate=0.01)]
    assert place("score", slots, PlacementRequest(3)) == {"a": 1, "b": 2}
    with pytest.raises(PlanningFailure) as caught:
        place("score", slots, PlacementRequest(3, nodes_limit=3))
    assert caught.value.code == "nodes_limit_reached"
    with pytest.raises(PlanningFailure) as caught:
        place("score", slots, PlacementRequest(7))
    assert caught.value.code == "insufficient_capacity"
    assert caught.value.details["need"] == 7
    assert caught.value.details["available"] == 6


def test_qos_balance_sends_an_instance_where_its_class_is_scarce() -> None:
    slots = [NodeSlot("a", 5), NodeSlot("b", 5)]
    nodes = {
        "a": NodeLoad({"cpu": 1000}, {"cpu": 0}, {"Guaranteed": 3, "BestEffort": 1}),
        "b": NodeLoad({"cpu": 1000}, {"cpu": 0}, {"Guaranteed": 1, "BestEffort": 3}),
    }
    options = score_options(request={"cpu": 0}, nodes=nodes, qos_class="Guaranteed", scorers={"qos-balance": 1})
    assert place("score", slots, PlacementRequest(1, options=options)) == {"b": 1}
    options["qos_class"] = "BestEffort"
    assert place("score", slots, PlacementRequest(1, options=options)) == {"a": 1}


@settings(max_examples=40, deadline=None)
@given(
    capacities=st.lists(st.integers(0, 6), min_size=1, max_size=6),
    usages=st.lists(st.floats(0, 1), min_size=6, max_size=6),
    scorer=st.sampled_from(["least-allocated", "most-allocated", "balanced-allocation"]),
    count=st.integers(0, 12),
)
def test_score_is_deterministic_and_respects_capacity(
    capacities: list[int], usages: list[float], scorer: str, count: int
) -> None:
    slots = [NodeSlot(f"n{i}", cap, usage=usages[i], rate=0.05) for i, cap in enumerate(capacities)]
    request = PlacementRequest(count, options={"scorers": {scorer: 1}})
    try:
        first = place("score", slots, request)
    except PlanningFailure:
        assert sum(capacities) < count
        return
    assert first == place("score", list(slots), request)
    assert sum(first.values()) == count
    assert all(first.get(slot.name, 0) <= slot.capacity for slot in slots)
    names = [slot.name for slot in slots]
    assert first == place_arrays("score", names, capacities, None, usages[: len(slots)], [0.05] * len(slots), request)


def test_merge_weights_request_overrides_pod() -> None:
    assert merge_weights(None, None) == {"least-allocated": 1, "balanced-allocation": 1}
    assert merge_weights({"least-allocated": 2, "qos-balance": 1}, {"qos-balance": 3}) == {
        "least-allocated": 2,
        "qos-balance": 3,
    }


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"scorers": {"fastest": 1}}, "options.scorers.fastest"),
        ({"scorers": {"least-allocated": -1}}, "options.scorers.least-allocated"),
        ({"scorers": {"least-allocated": 0}}, "options.scorers"),
        ({"scorers": {"qos-balance": 1}}, "options.qos_class"),
        ({"qos_class": "Gold"}, "options.qos_class"),
        ({"request": {"cpu": 1}, "nodes": {}}, "options.nodes.a"),
        ({"request": {"cpu": -1}, "nodes": {"a": {"allocatable": {"cpu": 1}}}}, "options.request.cpu"),
        ({"request": {"cpu": 1}, "nodes": {"a": {"allocatable": {"cpu": "x"}}}}, "options.nodes.a.allocatable.cpu"),
        (
            {"request": {"cpu": 1}, "nodes": {"a": {"allocatable": {"cpu": 1}, "qos": {"Gold": 1}}}},
            "options.nodes.a.qos",
        ),
        ({"request": {"cpu": 1}, "nodes": {"a": {"allocatable": {}, "extra": 1}}}, "options.nodes.a"),
        ({"request": {"cpu": 1}, "resource_weights": {"gpu": 1}, "nodes": {"a": {}}}, "options.resource_weights.gpu"),
        ({"colour": "red"}, "options"),
    ],
)
def test_malformed_options_name_the_field(options: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        place("score", [NodeSlot("a", 3)], PlacementRequest(1, options=options))
    assert caught.value.field == field


@settings(max_examples=80, deadline=None)
@given(
    data=st.data(),
    nodes=st.integers(1, 5),
    count=st.integers(1, 10),
    weights=st.fixed_dictionaries(
        {
            "least-allocated": st.integers(0, 3),
            "most-allocated": st.integers(0, 3),
            "balanced-allocation": st.integers(0, 3),
            "qos-balance": st.integers(0, 3),
        }
    ).filter(lambda w: any(w.values())),
)
def test_score_mode_equals_a_plain_one_at_a_time_reference(
    data: st.DataObject, nodes: int, count: int, weights: dict[str, int]
) -> None:
    names = [f"n{i}" for i in range(nodes)]
    capacity = [data.draw(st.integers(0, 6)) for _ in names]
    allocatable = [[data.draw(st.integers(0, 4000)), data.draw(st.integers(0, 64))] for _ in names]
    requested = [[data.draw(st.integers(0, 4000)), data.draw(st.integers(0, 64))] for _ in names]
    qos = [[data.draw(st.integers(0, 4)) for _ in QOS_CLASSES] for _ in names]
    request = [data.draw(st.integers(0, 500)), data.draw(st.integers(0, 8))]
    cls = data.draw(st.integers(0, 2))
    options = score_options(
        request={"cpu": request[0], "memory": request[1]},
        nodes={
            name: NodeLoad(
                {"cpu": allocatable[i][0], "memory": allocatable[i][1]},
                {"cpu": requested[i][0], "memory": requested[i][1]},
                dict(zip(QOS_CLASSES, qos[i], strict=True)),
            )
            for i, name in enumerate(names)
        },
        scorers=weights,
        qos_class=QOS_CLASSES[cls],
    )
    slots = [NodeSlot(name, capacity[i]) for i, name in enumerate(names)]
    try:
        answer = place("score", slots, PlacementRequest(count, options=options))
    except PlanningFailure:
        assert sum(capacity) < count
        return
    # Reference: every step rescoring every node with the scalar formulas, best total first, ties to input order.
    placed = [0] * nodes
    for _ in range(count):
        best, best_total = -1, -math.inf
        for i in range(nodes):
            if placed[i] >= capacity[i]:
                continue
            after = [requested[i][r] + request[r] for r in range(2)]
            total = 0.0
            for name, weight in weights.items():
                if weight == 0:
                    continue
                if name == "least-allocated":
                    score = float(least_formula(after, allocatable[i], [1, 1]))
                elif name == "most-allocated":
                    score = float(most_formula(after, allocatable[i], [1, 1]))
                elif name == "balanced-allocation":
                    score = float(balanced_formula(after, allocatable[i]))
                else:
                    score = qos_formula(qos, i, cls)
                total += weight * score
            if total > best_total:
                best, best_total = i, total
        placed[best] += 1
        requested[best] = [requested[best][r] + request[r] for r in range(2)]
        qos[best][cls] += 1
    assert answer == {name: n for name, n in zip(names, placed, strict=True) if n}


def test_deploy_score_options_from_planning_nodes_drive_plan_deploy() -> None:
    from eru.planning import NodeResources, PlanningConfig, normalize_request, plan_deploy
    from eru.planning.scorers.from_resources import deploy_score_options

    config = PlanningConfig()
    nodes = [
        NodeResources("a", {str(c): 100 for c in range(8)}, 32 * GIB, used_cpu_map={"0": 100, "1": 100}),
        NodeResources("b", {str(c): 100 for c in range(8)}, 32 * GIB),
    ]
    request = normalize_request(
        {"cpu_bind": True, "cpu_request": 1, "cpu_limit": 1, "memory_request": GIB, "memory_limit": GIB}, config
    )
    options = deploy_score_options(
        nodes, request, {"scorers": {"most-allocated": 1}}, pod_weights={"least-allocated": 1}
    )
    assert options["scorers"] == {"least-allocated": 1, "most-allocated": 1}
    assert options["qos_class"] == "Guaranteed"
    assert options["request"] == {"cpu": 100, "memory": GIB}
    least = deploy_score_options(nodes, request, {"scorers": {"least-allocated": 1}})
    assert plan_deploy(nodes, request, config, mode="score", count=1, options=least).placements == {"b": 1}
    most = deploy_score_options(nodes, request, {"scorers": {"most-allocated": 1}})
    assert plan_deploy(nodes, request, config, mode="score", count=1, options=most).placements == {"a": 1}
