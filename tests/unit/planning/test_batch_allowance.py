"""Batch placement against reclaimed capacity (docs/colocation.md): the allowance bounds batch requests only, never
raises a capacity, and everything stays deterministic; `eru plan` reads the allowance and the priority class."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eru.errors import InvalidInput, PlanningFailure
from eru.plan_api import solve
from eru.planning import NodeResources, NormalizedRequest, PlanningConfig, node_capacity, plan_deploy
from eru.planning.batch import allowance_from_condition, batch_bound, charge_batch, frees_batch_room, less_placed

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CONFIG = PlanningConfig(share_base=10)
GIB = 1 << 30


@st.composite
def nodes(draw: st.DrawFn, name: str = "n") -> NodeResources:
    size = draw(st.integers(1, 6))
    cpu_map = {str(core): 10 * draw(st.integers(1, 3)) for core in range(size)}
    used = {core: draw(st.integers(0, pieces)) for core, pieces in cpu_map.items()}
    numa = {}
    if draw(st.booleans()):
        numa = {core: str(int(core) % 2) for core in cpu_map}
    return NodeResources(
        name,
        cpu_map,
        draw(st.integers(0, 16)),
        numa=numa,
        used_cpu_map={core: amount for core, amount in used.items() if amount},
        used_memory=draw(st.integers(0, 4)),
        batch_cpu=draw(st.one_of(st.none(), st.integers(0, 80))),
        batch_memory=draw(st.one_of(st.none(), st.integers(0, 16))),
    )


@st.composite
def requests(draw: st.DrawFn) -> NormalizedRequest:
    cpu_bind = draw(st.booleans())
    cpu = draw(st.integers(1 if cpu_bind else 0, 25))
    return NormalizedRequest(cpu_bind, cpu, cpu, draw(st.integers(0, 5)), 0, batch=True)


@SETTINGS
@given(nodes(), requests())
def test_batch_capacity_is_bounded_by_ordinary_capacity_and_the_allowance(
    node: NodeResources, request: NormalizedRequest
) -> None:
    ordinary = node_capacity(node, replace(request, batch=False), CONFIG)
    batch = node_capacity(node, request, CONFIG)
    assert batch <= ordinary
    if node.batch_cpu is not None and request.cpu_request:
        assert batch * request.cpu_request <= node.batch_cpu
    if node.batch_memory is not None and request.memory_request:
        assert batch * request.memory_request <= node.batch_memory
    bound = batch_bound(node, request)
    assert batch == (ordinary if bound is None else min(ordinary, bound))


@SETTINGS
@given(nodes(), requests())
def test_prod_and_mid_ignore_the_allowance(node: NodeResources, request: NormalizedRequest) -> None:
    prod = replace(request, batch=False)
    without = replace(node, batch_cpu=None, batch_memory=None)
    assert node_capacity(node, prod, CONFIG) == node_capacity(without, prod, CONFIG)
    assert batch_bound(node, prod) is None


@SETTINGS
@given(st.lists(nodes(), min_size=1, max_size=4), requests(), st.integers(0, 12))
def test_batch_deploys_are_deterministic_and_keep_to_the_allowance(
    drawn: list[NodeResources], request: NormalizedRequest, count: int
) -> None:
    pod = [replace(node, name=f"n{index}") for index, node in enumerate(drawn)]
    outcomes = []
    for _ in range(2):
        try:
            plan = plan_deploy(pod, request, CONFIG, mode="auto", count=count)
        except PlanningFailure as failure:
            outcomes.append(("failed", failure.details["available"]))
            continue
        outcomes.append(("placed", plan.placements, [(p.node, dict(p.cpu_map), p.numa_node) for p in plan.containers]))
        for node in pod:
            placed = plan.placements.get(node.name, 0)
            assert placed <= plan.capacities[node.name]
            left = charge_batch(node, request, placed)
            if node.batch_cpu is not None:
                assert left.batch_cpu == node.batch_cpu - placed * request.cpu_request
            if node.batch_memory is not None:
                assert left.batch_memory == node.batch_memory - placed * request.memory_request
    assert outcomes[0] == outcomes[1]


def test_charge_batch_lowers_the_allowance_for_batch_only() -> None:
    node = NodeResources("n", {"0": 100}, GIB, batch_cpu=250, batch_memory=GIB)
    batch = NormalizedRequest(False, 100, 100, GIB // 4, 0, batch=True)
    assert charge_batch(node, batch, 2) == replace(node, batch_cpu=50, batch_memory=GIB // 2)
    assert charge_batch(node, batch, 5) == replace(node, batch_cpu=0, batch_memory=0)
    assert charge_batch(node, replace(batch, batch=False), 2) is node


def test_allowance_from_a_stored_condition() -> None:
    condition = {"node": "n", "time": 1.0, "batch_cpu_capacity": 2.567, "batch_memory_capacity": 3 * GIB}
    assert allowance_from_condition(condition, 100) == (256, 3 * GIB)  # rounded down to whole pieces
    assert allowance_from_condition(None, 100) == (None, None)  # no condition yet: no bound
    assert allowance_from_condition({"batch_cpu_capacity": "x", "batch_memory_capacity": -5}, 100) == (None, 0)
    assert less_placed((256, 3 * GIB), 300, GIB) == (0, 2 * GIB)
    assert less_placed((None, None), 300, GIB) == (None, None)


def _problem(priority_class: str | None, count: int) -> dict[str, object]:
    problem: dict[str, object] = {
        "count": count,
        "request": {"cpu_bind": True, "cpu_request": 1, "memory_request": "1GiB"},
        "nodes": [
            {"name": "a", "cpu_map": {str(i): 100 for i in range(8)}, "memory": "16GiB", "batch": {"cpu": 2.5}},
            {"name": "b", "cpu_map": {str(i): 100 for i in range(8)}, "memory": "16GiB", "batch": {"memory": "3GiB"}},
            {"name": "c", "cpu_map": {str(i): 100 for i in range(4)}, "memory": "16GiB"},
        ],
    }
    if priority_class is not None:
        problem["priority_class"] = priority_class
    return problem


def test_eru_plan_bounds_batch_by_the_allowance() -> None:
    answer = solve(_problem("batch", 9))
    assert answer["capacity"] == {"a": 2, "b": 3, "c": 4}
    assert answer["deploy"] == {"a": 2, "b": 3, "c": 4}
    for priority_class in (None, "prod", "mid"):
        assert solve(_problem(priority_class, 9))["capacity"] == {"a": 8, "b": 8, "c": 4}


def test_eru_plan_failure_names_the_batch_allowance() -> None:
    with pytest.raises(PlanningFailure) as caught:
        solve(_problem("batch", 10))
    details = caught.value.details
    assert details["resources"]["a"]["limited_by"] == "batch_cpu"
    assert details["resources"]["a"]["batch_allowance"]["cpu"] == 2.5
    assert details["resources"]["b"]["limited_by"] == "batch_memory"
    assert details["resources"]["c"]["limited_by"] == "cpu"
    assert "batch_cpu on 1 node" in caught.value.message


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"priority_class": "best-effort"}, "priority_class"),
        ({"batch": {"cpu": -1}}, "nodes[0].batch.cpu"),
        ({"batch": {"cpu": 0.001}}, "nodes[0].batch.cpu"),
        ({"batch": {"disk": 1}}, "nodes[0].batch.disk"),
        ({"batch": {"memory": "lots"}}, "nodes[0].batch.memory"),
        ({"batch": 3}, "nodes[0].batch"),
    ],
)
def test_bad_batch_input_names_the_field(change: dict[str, object], field: str) -> None:
    problem = _problem("batch", 1)
    if "priority_class" in change:
        problem.update(change)
    else:
        nodes_list = problem["nodes"]
        assert isinstance(nodes_list, list)
        nodes_list[0] = {**nodes_list[0], **change}
    with pytest.raises(InvalidInput) as caught:
        solve(problem)
    assert caught.value.field == field


def test_a_condition_frees_batch_room_when_forbid_clears_or_capacity_grows() -> None:
    base = {"forbid_schedule_cpu": False, "batch_cpu_capacity": 2.0, "batch_memory_capacity": GIB}
    assert frees_batch_room(base, {**base, "batch_cpu_capacity": 2.5})
    assert frees_batch_room(base, {**base, "batch_memory_capacity": 2 * GIB})
    assert frees_batch_room({**base, "forbid_schedule_cpu": True}, base)
    assert not frees_batch_room(base, base)
    assert not frees_batch_room(base, {**base, "batch_cpu_capacity": 1.0})
    assert not frees_batch_room(base, {**base, "forbid_schedule_memory": True, "batch_cpu_capacity": 9.0})
    assert not frees_batch_room(None, base)  # a first condition only restricts


def _realloc(priority_class: str | None, cpu_delta: float) -> dict[str, object]:
    node = {
        "name": "a",
        "cpu_map": {str(i): 100 for i in range(4)},
        "memory": "8GiB",
        "used": {"cpu_map": {"0": 100}, "memory": "1GiB"},
        "batch": {"cpu": 0.5, "memory": "1GiB"},
    }
    origin = {"cpu_bind": True, "cpu_request": 1, "memory_request": "1GiB", "cpu_map": {"0": 100}}
    problem: dict[str, object] = {
        "kind": "realloc",
        "node": node,
        "origin": origin,
        "request": {"cpu_request": cpu_delta},
    }
    if priority_class is not None:
        problem["priority_class"] = priority_class
    return problem


def test_a_batch_container_grows_only_into_the_allowance() -> None:
    with pytest.raises(PlanningFailure) as caught:
        solve(_realloc("batch", 1))
    assert caught.value.details["limited_by"] == "batch_cpu"
    assert (caught.value.details["need"], caught.value.details["available"]) == (1.0, 0.5)
    assert "batch allowance is 0.5 cores" in caught.value.message
    assert solve(_realloc("batch", 0.5))["cpu_request"] == 1.5
    assert solve(_realloc("batch", -0.5))["cpu_request"] == 0.5
    assert solve(_realloc(None, 1))["cpu_request"] == 2.0  # prod ignores the allowance
    with pytest.raises(InvalidInput) as bad:
        solve(_realloc("be", 1))
    assert bad.value.field == "priority_class"
