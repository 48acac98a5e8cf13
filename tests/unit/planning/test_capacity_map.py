"""`conclude`'s capacities read by bisection (`eru.planning.capacity_map.NodeCapacities`) against the dict of every
node it replaced (`Staged.capacities()`), over random pods: the same plan, the same answers, the same refusals of a
faulty placement, whether the nodes are sorted by name (a snapshot) or not (an `eru plan` problem)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eru.errors import InvalidInput
from eru.planning import NodeResources, PlanningConfig, normalize_request
from eru.planning.capacity_map import NodeCapacities
from eru.planning.decide import conclude, place_locally, stage
from eru.planning.plan import Plan
from eru.planning.snapshot import ClusterSnapshot, DeployAsk

CONFIG = PlanningConfig()
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _pod(seed: int, size: int, shuffled: bool) -> tuple[NodeResources, ...]:
    rng = random.Random(seed)
    nodes = [
        NodeResources(
            f"n{index:03d}",
            {str(core): 100 for core in range(rng.choice((1, 2, 4, 8)))},
            rng.choice((1, 2, 4, 8)) << 30,
            used_memory=rng.choice((0, 1, 2)) << 29,
        )
        for index in range(size)
    ]
    if shuffled:
        rng.shuffle(nodes)
    return tuple(nodes)


def _reference(plan: Plan, staged_capacities: dict[str, int]) -> Plan:
    return replace(plan, capacities=staged_capacities)


@SETTINGS
@given(
    seed=st.integers(0, 10**6),
    size=st.integers(1, 120),
    shuffled=st.booleans(),
    mode=st.sampled_from(["auto", "fill", "each", "global", "drained"]),
    count=st.integers(0, 12),
    bind=st.booleans(),
)
def test_the_plan_and_its_answers_are_the_ones_of_every_nodes_capacity(
    seed: int, size: int, shuffled: bool, mode: str, count: int, bind: bool
) -> None:
    request = normalize_request({"cpu_bind": bind, "cpu_request": 0.5, "memory_request": 256 << 20}, CONFIG)
    snapshot = ClusterSnapshot(config=CONFIG, nodes=_pod(seed, size, shuffled))
    staged = stage(snapshot, DeployAsk(request, mode, count))
    placed = place_locally(staged)
    outcome = conclude(staged, placed)
    if not isinstance(outcome, Plan):
        return
    every = staged.capacities()
    reference = _reference(outcome, every)
    assert outcome.recorded_answer() == reference.recorded_answer()
    assert list(outcome.recorded_answer()["capacity"].items()) == list(reference.recorded_answer()["capacity"].items())
    assert list(outcome.answer()["capacity"].items()) == list(every.items())
    assert outcome == reference


@SETTINGS
@given(seed=st.integers(0, 10**6), size=st.integers(1, 30), shuffled=st.booleans())
def test_lookups_and_iteration_are_the_dicts(seed: int, size: int, shuffled: bool) -> None:
    request = normalize_request({"cpu_request": 0.5, "memory_request": 256 << 20}, CONFIG)
    staged = stage(ClusterSnapshot(config=CONFIG, nodes=_pod(seed, size, shuffled)), DeployAsk(request, "auto", 1))
    every = staged.capacities()
    rng = random.Random(seed)
    names = [*every, "n999", "", "a", "zzz"]
    rng.shuffle(names)
    capacities = NodeCapacities(staged.nodes, staged.analyses)
    for name in names:  # lookups first (by bisection), then the whole map
        assert (name in capacities) == (name in every)
        assert capacities.get(name) == every.get(name)
    assert len(capacities) == len(every)
    assert list(capacities.items()) == list(every.items())
    assert dict(capacities) == every


@pytest.mark.parametrize("shuffled", [False, True])
@pytest.mark.parametrize(
    ("placed", "field", "reason"),
    [
        ({"n999": 1}, "placements.n999", "the mode placed instances on an unknown node"),
        ({"n001": 10**6}, "placements.n001", "the mode placed 1000000 instances, capacity"),
        ({"n002": -1}, "placements.n002", "expected a non-negative integer, got -1"),
    ],
)
def test_a_faulty_placement_is_refused_as_before(
    shuffled: bool, placed: dict[str, int], field: str, reason: str
) -> None:
    request = normalize_request({"cpu_request": 0.5, "memory_request": 256 << 20}, CONFIG)
    staged = stage(ClusterSnapshot(config=CONFIG, nodes=_pod(7, 5, shuffled)), DeployAsk(request, "auto", 1))
    with pytest.raises(InvalidInput) as raised:
        conclude(staged, placed)
    assert raised.value.details["field"] == field
    assert raised.value.message.startswith(f"{field}: {reason}")


@pytest.mark.parametrize(("size", "looked_up"), [(200, True), (8, False)])
def test_few_placed_of_many_nodes_are_looked_up_and_many_take_the_dict(size: int, looked_up: bool) -> None:
    request = normalize_request({"cpu_request": 0.5, "memory_request": 256 << 20}, CONFIG)
    staged = stage(ClusterSnapshot(config=CONFIG, nodes=_pod(3, size, False)), DeployAsk(request, "auto", 3))
    outcome = conclude(staged, place_locally(staged))
    assert isinstance(outcome, Plan)
    assert isinstance(outcome.capacities, NodeCapacities) == looked_up
    assert list(outcome.answer()["capacity"].items()) == list(staged.capacities().items())
    assert outcome.recorded_answer() == _reference(outcome, staged.capacities()).recorded_answer()
