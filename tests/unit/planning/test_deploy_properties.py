"""Property tests of the whole deploy pipeline (`plan_deploy`): whatever the mode, the plans match the placement,
nothing is overcommitted, every plan is exact, and the same input gives the same output."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eru.errors import PlanningFailure
from eru.planning import NodeResources, PlanningConfig, charge, normalize_request, plan_deploy

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BASE = 100


@st.composite
def pods(draw: st.DrawFn) -> list[NodeResources]:
    nodes = []
    for index in range(draw(st.integers(1, 5))):
        cores = draw(st.integers(1, 12))
        cpu_map = {str(core): BASE * draw(st.sampled_from([1, 1, 1, 2])) for core in range(cores)}
        used = {core: draw(st.integers(0, pieces // 10)) * 10 for core, pieces in cpu_map.items()}
        used = {core: amount for core, amount in used.items() if amount}
        numa: dict[str, str] = {}
        numa_memory: dict[str, int] = {}
        if draw(st.booleans()):
            numa = {core: str(int(core) % 2) for core in cpu_map}
            numa_memory = {"0": draw(st.integers(0, 8)), "1": draw(st.integers(0, 8))}
        memory = draw(st.integers(0, 16))
        nodes.append(NodeResources(f"n{index}", cpu_map, memory, numa, numa_memory, used, draw(st.integers(0, memory))))
    return nodes


@SETTINGS
@given(
    pods(),
    st.sampled_from(["auto", "global", "drained", "each", "fill"]),
    st.integers(0, 12),
    st.integers(1, 30),
    st.integers(0, 2),
    st.integers(-1, 3),
    st.booleans(),
)
def test_deploy_plans_are_sound(
    nodes: list[NodeResources], mode: str, count: int, tenths: int, memory: int, cap: int, bind: bool
) -> None:
    config = PlanningConfig(max_fragment_cores=cap)
    request = normalize_request({"cpu_bind": bind, "cpu_request": tenths / 10, "memory_request": memory}, config)
    try:
        plan = plan_deploy(nodes, request, config, mode=mode, count=count)
    except PlanningFailure as failure:
        details = failure.details
        plan = None
    if plan is None:
        assert "need" in details or "per_node" in details or "resources" in details  # always with the numbers
        return
    assert plan == plan_deploy(nodes, request, config, mode=mode, count=count)
    by_node: dict[str, list[object]] = {}
    for container in plan.containers:
        by_node.setdefault(container.node, []).append(container)
        if bind:
            assert sum(container.cpu_map.values()) == request.cpu_request
            assert sum(1 for pieces in container.cpu_map.values() if pieces != BASE) <= 1
        else:
            assert container.cpu_map == {}
    assert {name: len(plans) for name, plans in by_node.items()} == plan.placements
    for node in nodes:
        placed = [container for container in plan.containers if container.node == node.name]
        assert len(placed) <= plan.capacities[node.name]
        charged = charge(node, placed)
        for core, registered in node.cpu_map.items():
            before = node.used_cpu_map.get(core, 0)
            assert charged.used_cpu_map.get(core, 0) == before or charged.used_cpu_map[core] <= registered
        if memory and placed:
            assert charged.used_memory <= node.memory
        for numa_id, amount in node.numa_memory.items():
            added = charged.used_numa_memory.get(numa_id, 0) - node.used_numa_memory.get(numa_id, 0)
            assert added == 0 or charged.used_numa_memory[numa_id] <= amount
