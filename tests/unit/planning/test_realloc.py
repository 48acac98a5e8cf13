"""Realloc planning (docs/planning.md): deltas, affinity to held cores, keep_cpu_bind, all-or-nothing groups, and the
property that a node is never charged for both the old and the new allocation."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from planning_helpers import GIB

from eru.errors import InvalidInput, PlanningFailure
from eru.planning import (
    NodeResources,
    PlanningConfig,
    ResourceDelta,
    RunningContainer,
    charge,
    materialize,
    normalize_request,
    plan_realloc,
    plan_realloc_group,
)

CONFIG = PlanningConfig()


def running(
    node: NodeResources, cpu: float, memory: int, *, bind: bool = True
) -> tuple[NodeResources, RunningContainer]:
    """A container planned and charged on `node`."""
    request = normalize_request({"cpu_bind": bind, "cpu_request": cpu, "memory_request": memory}, CONFIG)
    plan = materialize([node], request, CONFIG, {node.name: 1})[0]
    container = RunningContainer(request, plan.cpu_map, plan.numa_node)
    return charge(node, [plan]), container


def idle(cores: int = 8, memory: int = 16 * GIB) -> NodeResources:
    return NodeResources("n", {str(core): 100 for core in range(cores)}, memory)


def test_growing_keeps_the_held_cores() -> None:
    node, container = running(idle(), 1.5, GIB)
    whole = next(core for core, pieces in container.cpu_map.items() if pieces == 100)
    fragment = next(core for core, pieces in container.cpu_map.items() if pieces == 50)
    result = plan_realloc(node, container, ResourceDelta(cpu_request=100, memory_request=GIB), CONFIG)
    plan = result.plans[0]
    assert result.requests[0].cpu_request == 250
    assert plan.cpu_map[whole] == 100
    assert plan.cpu_map[fragment] == 50
    assert result.node.used_memory == 2 * GIB
    assert sum(result.node.used_cpu_map.values()) == 250


def test_shrinking_to_whole_cores_keeps_a_held_whole_core() -> None:
    node, container = running(idle(), 2.5, GIB)
    result = plan_realloc(node, container, ResourceDelta(cpu_request=-150), CONFIG)
    (core,) = result.plans[0].cpu_map
    assert container.cpu_map[core] == 100


def test_keep_cpu_bind_keeps_a_bound_container_bound() -> None:
    node, container = running(idle(), 1, GIB)
    result = plan_realloc(node, container, ResourceDelta(cpu_bind=False, keep_cpu_bind=True), CONFIG)
    assert result.requests[0].cpu_bind
    unbound = plan_realloc(node, container, ResourceDelta(cpu_bind=False), CONFIG)
    assert not unbound.requests[0].cpu_bind
    assert unbound.plans[0].cpu_map == {}
    assert sum(unbound.node.used_cpu_map.values()) == 0


def test_negative_result_is_invalid_input_with_numbers() -> None:
    node, container = running(idle(), 1, GIB)
    with pytest.raises(InvalidInput) as error:
        plan_realloc(node, container, ResourceDelta(memory_request=-2 * GIB), CONFIG)
    assert error.value.field == "request.memory_request"
    assert error.value.details["result"] == -GIB


def test_too_big_is_a_planning_failure_and_changes_nothing() -> None:
    node, container = running(idle(cores=4), 1, GIB)
    with pytest.raises(PlanningFailure) as failure:
        plan_realloc(node, container, ResourceDelta(cpu_request=400), CONFIG)
    assert failure.value.details["need"] == 1
    assert failure.value.details["available"] == 0
    assert node.used_cpu_map == {"0": 100}


def test_group_fits_together_or_fails_together() -> None:
    node = idle(cores=4)
    node, first = running(node, 1, GIB)
    node, second = running(node, 1, GIB)
    grown = plan_realloc_group(node, [first, second], ResourceDelta(cpu_request=100), CONFIG)
    assert [len(plan.cpu_map) for plan in grown.plans] == [2, 2]
    assert sum(grown.node.used_cpu_map.values()) == 400
    with pytest.raises(PlanningFailure):
        plan_realloc_group(node, [first, second], ResourceDelta(cpu_request=150), CONFIG)


def test_origin_not_on_the_node_is_invalid() -> None:
    node = idle()
    request = normalize_request({"cpu_bind": True, "cpu_request": 1}, CONFIG)
    with pytest.raises(InvalidInput) as error:
        plan_realloc(node, RunningContainer(request, {"0": 100}), ResourceDelta(), CONFIG)
    assert error.value.field == "origin.cpu_map.0"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(2, 8),
    st.integers(1, 4),
    st.integers(1, 3),
    st.integers(1, 35),
    st.integers(-30, 30),
    st.integers(-2, 2),
    st.booleans(),
)
def test_realloc_never_double_charges(
    cores: int, others: int, memory_gib: int, cpu_tenths: int, delta_tenths: int, delta_gib: int, bind: bool
) -> None:
    node = idle(cores=cores, memory=12 * GIB)
    containers = []
    for _ in range(others):
        try:
            node, container = running(node, cpu_tenths / 10, memory_gib * GIB, bind=bind)
        except PlanningFailure:
            break
        containers.append(container)
    if not containers:
        return
    target = containers[-1]
    delta = ResourceDelta(cpu_request=delta_tenths * 10, memory_request=delta_gib * GIB)
    try:
        result = plan_realloc(node, target, delta, CONFIG)
    except (InvalidInput, PlanningFailure):
        return
    plan = result.plans[0]
    expected_memory = node.used_memory - target.request.memory_request + plan.memory
    assert result.node.used_memory == expected_memory <= node.memory
    for core, registered in node.cpu_map.items():
        expected = node.used_cpu_map.get(core, 0) - target.cpu_map.get(core, 0) + plan.cpu_map.get(core, 0)
        assert result.node.used_cpu_map.get(core, 0) == expected <= registered
    if result.requests[0].cpu_bind:
        assert sum(plan.cpu_map.values()) == result.requests[0].cpu_request
        assert sum(1 for pieces in plan.cpu_map.values() if pieces != 100) <= 1


def test_the_held_fragment_core_stays_the_fragment_core() -> None:
    node = NodeResources(
        "n", {str(core): 100 for core in range(4)}, 8 * GIB, used_cpu_map={"2": 100, "3": 50}, used_memory=GIB
    )
    request = normalize_request({"cpu_bind": True, "cpu_request": 1.5, "memory_request": GIB}, CONFIG)
    container = RunningContainer(request, {"2": 100, "3": 50})
    result = plan_realloc(node, container, ResourceDelta(cpu_request=100), CONFIG)
    assert dict(result.plans[0].cpu_map) == {"2": 100, "0": 100, "3": 50}


def test_numa_container_stays_in_its_numa_node() -> None:
    numa = {str(core): str(core // 4) for core in range(8)}
    node = NodeResources(
        "n",
        {str(core): 100 for core in range(8)},
        8 * GIB,
        numa=numa,
        numa_memory={"0": 4 * GIB, "1": 4 * GIB},
        used_cpu_map={"4": 100},
        used_memory=GIB,
        used_numa_memory={"1": GIB},
    )
    request = normalize_request({"cpu_bind": True, "cpu_request": 1, "memory_request": GIB}, CONFIG)
    container = RunningContainer(request, {"4": 100}, "1")
    result = plan_realloc(node, container, ResourceDelta(cpu_request=200, memory_request=GIB), CONFIG)
    plan = result.plans[0]
    assert plan.numa_node == "1"
    assert "4" in plan.cpu_map
    assert all(numa[core] == "1" for core in plan.cpu_map)
    assert result.node.used_numa_memory == {"1": 2 * GIB}
    # Too big for NUMA node 1's memory: planned across NUMA nodes instead, NUMA memory returned.
    across = plan_realloc(node, container, ResourceDelta(memory_request=4 * GIB), CONFIG)
    assert across.plans[0].numa_node is None
    assert across.node.used_numa_memory.get("1", 0) == 0
