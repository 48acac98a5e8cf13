"""Property tests of CPU-prime capacity and plans: brute force on small nodes, Eru's heuristic as a floor, and the
invariants every plan must keep (no overcommit, no core twice, at most one fragment core)."""

from __future__ import annotations

import functools
import heapq
import itertools
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eru.planning import NodeResources, PlanningConfig, charge, cores, materialize, node_capacity, normalize_request
from eru.planning.resources import free_cpu

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BASE = 10  # small share_base keeps the brute force fast while exercising the same arithmetic


@st.composite
def small_nodes(draw: st.DrawFn, max_cores: int = 6) -> NodeResources:
    size = draw(st.integers(1, max_cores))
    cpu_map: dict[str, int] = {}
    used: dict[str, int] = {}
    for core in range(size):
        registered = BASE * draw(st.integers(1, 3))
        cpu_map[str(core)] = registered
        used_pieces = draw(st.one_of(st.just(0), st.integers(0, registered)))
        if used_pieces:
            used[str(core)] = used_pieces
    memory = draw(st.integers(0, 12))
    used_memory = draw(st.integers(0, 3))
    return NodeResources("n", cpu_map, memory, used_cpu_map=used, used_memory=used_memory)


def _max_whole_groups(units: tuple[int, ...], per_plan: int) -> int:
    """Most groups of `per_plan` distinct cores, each core in at most units[c] groups, by exhaustive search."""

    @functools.cache
    def best(state: tuple[int, ...]) -> int:
        result = 0
        available = [index for index, unit in enumerate(state) if unit > 0]
        for group in itertools.combinations(available, per_plan):
            after = list(state)
            for index in group:
                after[index] -= 1
            result = max(result, 1 + best(tuple(sorted(after))))
        return result

    return best(tuple(sorted(units)))


def brute_force(node: NodeResources, pieces: int, memory: int, cap: int) -> int:
    """The model's maximum by trying every role assignment (docs/planning.md)."""
    whole, fragment = divmod(pieces, BASE)
    free = [value for value in free_cpu(node).values() if value > 0]
    fixed = [value for value in free if value % BASE]
    eligible = [value for value in free if not value % BASE]
    memory_bound = (node.memory - node.used_memory) // memory if memory else 10**9
    memory_bound = max(0, memory_bound)
    allowed = len(eligible) if cap < 0 else max(0, cap - len(fixed))
    best = 0
    for roles in itertools.product((False, True), repeat=len(eligible)):  # True = fragment source
        if fragment == 0 and any(roles):
            continue
        if sum(roles) > allowed:
            continue
        units = tuple(value // BASE for value, is_fragment in zip(eligible, roles, strict=True) if not is_fragment)
        fragments = [value for value, is_fragment in zip(eligible, roles, strict=True) if is_fragment] + fixed
        plans = memory_bound
        if whole:
            plans = min(plans, _max_whole_groups(units, whole))
        if fragment:
            plans = min(plans, sum(value // fragment for value in fragments))
        best = max(best, plans)
    return best


def eru_split_heuristic(node: NodeResources, pieces: int, memory: int, cap: int) -> int:
    """Eru's planner: turn the most-loaded whole cores into fragment cores one at a time, keep the best split."""
    whole, fragment = divmod(pieces, BASE)
    free = free_cpu(node)
    order = sorted((value, int(core)) for core, value in free.items() if value > 0)
    fixed = [value for value, _ in order if value % BASE]
    eligible = [value for value, _ in order if not value % BASE]
    memory_bound = max(0, (node.memory - node.used_memory) // memory) if memory else 10**9

    def greedy_whole(units: list[int]) -> int:
        heap = [-unit for unit in units]
        heapq.heapify(heap)
        plans = 0
        while len(heap) >= whole:
            taken = [-heapq.heappop(heap) for _ in range(whole)]
            plans += 1
            for unit in taken:
                if unit > 1:
                    heapq.heappush(heap, -(unit - 1))
        return plans

    best = 0
    for split in range(len(eligible) + 1):
        if fragment == 0 and split:
            break
        if cap >= 0 and split > max(0, cap - len(fixed)):
            break
        plans = memory_bound
        if whole:
            plans = min(plans, greedy_whole([value // BASE for value in eligible[split:]]))
        if fragment:
            plans = min(plans, sum(value // fragment for value in fixed + eligible[:split]))
        best = max(best, plans)
    return best


def check_plans(node: NodeResources, pieces: int, memory: int, config: PlanningConfig, capacity: int) -> None:
    """Materialised plans: exactly `capacity`, each exact, nothing overcommitted."""
    request = normalize_request({"cpu_bind": True, "cpu_request": pieces / BASE, "memory_request": memory}, config)
    plans = materialize([node], request, config, {"n": capacity}) if capacity else []
    assert len(plans) == capacity
    whole, fragment = divmod(pieces, BASE)
    for plan in plans:
        assert sum(plan.cpu_map.values()) == pieces
        assert sum(1 for value in plan.cpu_map.values() if value == BASE) == whole
        assert sum(1 for value in plan.cpu_map.values() if value != BASE) == (1 if fragment else 0)
    charged = charge(node, plans)
    for core, registered in node.cpu_map.items():
        before = node.used_cpu_map.get(core, 0)
        after = charged.used_cpu_map.get(core, 0)
        assert after == before or after <= registered
    if memory:
        assert charged.used_memory <= max(node.memory, node.used_memory)


@SETTINGS
@given(small_nodes(), st.integers(1, 35), st.integers(0, 3), st.integers(-1, 3))
def test_capacity_equals_brute_force_on_small_nodes(node: NodeResources, pieces: int, memory: int, cap: int) -> None:
    config = PlanningConfig(share_base=BASE, max_fragment_cores=cap)
    request = normalize_request({"cpu_bind": True, "cpu_request": pieces / BASE, "memory_request": memory}, config)
    capacity = node_capacity(node, request, config)
    assert capacity == brute_force(node, pieces, memory, cap)
    check_plans(node, pieces, memory, config, capacity)


@SETTINGS
@given(small_nodes(max_cores=24), st.integers(1, 45), st.integers(0, 2), st.integers(-1, 6))
def test_capacity_never_below_eru_and_plans_are_sound(node: NodeResources, pieces: int, memory: int, cap: int) -> None:
    config = PlanningConfig(share_base=BASE, max_fragment_cores=cap)
    request = normalize_request({"cpu_bind": True, "cpu_request": pieces / BASE, "memory_request": memory}, config)
    capacity = node_capacity(node, request, config)
    assert capacity >= eru_split_heuristic(node, pieces, memory, cap)
    check_plans(node, pieces, memory, config, capacity)
    # Same input, same output.
    placements = {"n": capacity}
    assert materialize([node], request, config, placements) == materialize([node], request, config, placements)
    # Deploying k of the plans leaves room for (at least) the other capacity − k. Only without a fragment cap: a
    # snapshot cannot tell a core whose fragments add up to whole cores from an untouched one (docs/planning.md).
    if capacity and cap < 0:
        taken = capacity // 2 or 1
        charged = charge(node, materialize([node], request, config, {"n": taken}))
        assert node_capacity(charged, request, config) >= capacity - taken


@st.composite
def numa_nodes(draw: st.DrawFn) -> NodeResources:
    node = draw(small_nodes(max_cores=8))
    numa_count = draw(st.integers(1, 3))
    numa = {core: str(draw(st.integers(0, numa_count - 1))) for core in node.cpu_map}
    numa_memory = {str(index): draw(st.integers(0, 8)) for index in range(numa_count)}
    return NodeResources("n", node.cpu_map, draw(st.integers(0, 16)), numa, numa_memory, node.used_cpu_map, 0, {})


@SETTINGS
@given(numa_nodes(), st.integers(1, 25), st.integers(0, 3), st.integers(-1, 3))
def test_numa_plans_stay_inside_their_numa_node(node: NodeResources, pieces: int, memory: int, cap: int) -> None:
    config = PlanningConfig(share_base=BASE, max_fragment_cores=cap)
    request = normalize_request({"cpu_bind": True, "cpu_request": pieces / BASE, "memory_request": memory}, config)
    capacity = node_capacity(node, request, config)
    check_plans(node, pieces, memory, config, capacity)
    plans = materialize([node], request, config, {"n": capacity})
    charged = charge(node, plans)
    for plan in plans:
        if plan.numa_node is not None:
            assert all(node.numa[core] == plan.numa_node for core in plan.cpu_map)
    for numa_id, amount in node.numa_memory.items():
        assert charged.used_numa_memory.get(numa_id, 0) <= amount
    # NUMA-local plans come first.
    kinds = [plan.numa_node is None for plan in plans]
    assert kinds == sorted(kinds)


@SETTINGS
@given(small_nodes(max_cores=16), st.integers(11, 45), st.integers(0, 2), st.integers(-1, 6))
def test_fallback_walks_never_below_eru(node: NodeResources, pieces: int, memory: int, cap: int) -> None:
    """With enumeration switched off, the fallback (Eru's walk and the reverse walk) still beats Eru's heuristic."""
    config = PlanningConfig(share_base=BASE, max_fragment_cores=cap)
    request = normalize_request({"cpu_bind": True, "cpu_request": pieces / BASE, "memory_request": memory}, config)
    with mock.patch.object(cores, "ENUMERATION_LIMIT", 0):
        capacity = node_capacity(node, request, config)
        assert capacity >= eru_split_heuristic(node, pieces, memory, cap)
        check_plans(node, pieces, memory, config, capacity)


@SETTINGS
@given(small_nodes(), st.integers(1, 35), st.integers(-1, 3))
def test_fragments_use_existing_fragment_sources_before_splitting_whole_cores(
    node: NodeResources, pieces: int, cap: int
) -> None:
    """Over the plans of a whole node, fragments come from cores that already serve fragments (free pieces not a
    multiple of share_base), most-loaded first (ties by id), each used for all the fragments it can give, and a whole
    core is split only after them (docs/planning.md). The expected order is derived from the free pieces alone."""
    config = PlanningConfig(share_base=BASE, max_fragment_cores=cap)
    request = normalize_request({"cpu_bind": True, "cpu_request": pieces / BASE}, config)
    fragment = pieces % BASE
    capacity = node_capacity(node, request, config)
    if not fragment or not capacity:
        return
    free = {core: value for core, value in free_cpu(node).items() if value > 0}
    existing = sorted((value, int(core)) for core, value in free.items() if value % BASE)
    expected = [str(core) for value, core in existing for _ in range(value // fragment)][:capacity]
    used = []
    for plan in materialize([node], request, config, {"n": capacity}):
        (core,) = [core for core, value in plan.cpu_map.items() if value != BASE]
        used.append(core)
    assert used[: len(expected)] == expected
    assert not {core for core in used[len(expected) :]} & {str(core) for _, core in existing}


def brute_force_conversions(node: NodeResources, pieces: int, cap: int) -> tuple[int, int]:
    """The most plans and, among the role assignments that reach it, the fewest whole cores converted to fragment
    sources, by trying every role assignment (memory left out)."""
    whole, fragment = divmod(pieces, BASE)
    free = [value for value in free_cpu(node).values() if value > 0]
    fixed = [value for value in free if value % BASE]
    eligible = [value for value in free if not value % BASE]
    allowed = len(eligible) if cap < 0 else max(0, cap - len(fixed))
    best = (0, 0)
    for roles in itertools.product((False, True), repeat=len(eligible)):  # True = converted to a fragment source
        if sum(roles) > allowed:
            continue
        units = tuple(value // BASE for value, converted in zip(eligible, roles, strict=True) if not converted)
        fragments = [value for value, converted in zip(eligible, roles, strict=True) if converted] + fixed
        plans = _max_whole_groups(units, whole) if whole else 10**9
        plans = min(plans, sum(value // fragment for value in fragments))
        if plans > best[0] or (plans == best[0] and plans and sum(roles) < best[1]):
            best = (plans, sum(roles))
    return best


@SETTINGS
@given(small_nodes(), st.integers(1, 35), st.integers(-1, 3))
def test_plans_convert_the_fewest_whole_cores_brute_force(node: NodeResources, pieces: int, cap: int) -> None:
    """The fragment refinement (issue 14, docs/planning.md "Plans") against brute force on small nodes: a node's
    plans reach the most plans any role assignment reaches, and split no more whole cores for fragments than the
    assignment that reaches it with the fewest conversions, so idle cores stay whole while a core that already
    serves fragments can give one."""
    if not pieces % BASE:
        return
    config = PlanningConfig(share_base=BASE, max_fragment_cores=cap)
    request = normalize_request({"cpu_bind": True, "cpu_request": pieces / BASE}, config)
    most, fewest = brute_force_conversions(node, pieces, cap)
    capacity = node_capacity(node, request, config)
    assert capacity == most
    if not capacity:
        return
    free = free_cpu(node)
    converted = set()
    for plan in materialize([node], request, config, {"n": capacity}):
        (core,) = [core for core, value in plan.cpu_map.items() if value != BASE]
        if free[core] % BASE == 0:
            converted.add(core)
    assert len(converted) == fewest
