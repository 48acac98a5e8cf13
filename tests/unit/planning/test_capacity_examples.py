"""The worked examples of docs/planning.md (after Eru's resource model), checked through the public API."""

from __future__ import annotations

import pytest
from planning_helpers import GIB, MIB, bind, node_with_free

from eru.errors import PlanningFailure
from eru.planning import (
    NodeResources,
    PlanningConfig,
    charge,
    materialize,
    node_capacity,
    normalize_request,
    plan_deploy,
    release,
)

CONFIG = PlanningConfig()


def test_32_idle_cores_at_1_5_give_21_plans() -> None:
    node = node_with_free({core: 100 for core in range(32)})
    assert node_capacity(node, bind(1.5), CONFIG) == 21
    plans = materialize([node], bind(1.5), CONFIG, {"n": 21})
    assert len(plans) == 21
    # The fragment cores are the lowest ids (all equally loaded), each split between two plans.
    assert [plan.cpu_map for plan in plans[:3]] == [{"11": 100, "0": 50}, {"12": 100, "0": 50}, {"13": 100, "1": 50}]


@pytest.mark.parametrize("cores", [1, 2, 3, 7, 16, 31, 32, 64])
def test_n_idle_cores_at_1_7_give_half(cores: int) -> None:
    node = node_with_free({core: 100 for core in range(cores)})
    assert node_capacity(node, bind(1.7), CONFIG) == cores // 2


def test_loaded_cores_at_1_3_give_four_exact_plans() -> None:
    node = node_with_free({0: 70, 1: 100, 2: 400})
    assert node_capacity(node, bind(1.3), CONFIG) == 4
    plans = materialize([node], bind(1.3), CONFIG, {"n": 4})
    assert [dict(plan.cpu_map) for plan in plans] == [
        {"0": 30, "2": 100},
        {"0": 30, "2": 100},
        {"1": 30, "2": 100},
        {"1": 30, "2": 100},
    ]


def test_numa_seed_example_gives_three() -> None:
    node = NodeResources(
        "n",
        {"0": 100, "1": 100, "2": 100, "3": 100},
        2 * GIB,
        numa={"0": "0", "1": "0", "2": "1", "3": "1"},
        numa_memory={"0": GIB, "1": GIB},
    )
    request = bind(1, 600 * MIB)
    assert node_capacity(node, request, CONFIG) == 3
    plans = materialize([node], request, CONFIG, {"n": 3})
    assert [plan.numa_node for plan in plans] == ["0", "1", None]
    assert [set(plan.cpu_map) <= {"0", "1"} for plan in plans[:1]] == [True]
    assert set(plans[1].cpu_map) <= {"2", "3"}


def test_memory_bounds_cpu_prime_capacity() -> None:
    node = node_with_free({core: 100 for core in range(32)}, memory=10 * GIB)
    assert node_capacity(node, bind(1, 3 * GIB), CONFIG) == 3


def test_max_fragment_cores_caps_fragment_sources() -> None:
    node = node_with_free({core: 100 for core in range(32)})
    config = PlanningConfig(max_fragment_cores=2)
    # 2 fragment cores give 4 halves → 4 plans; unlimited would give 21.
    assert node_capacity(node, bind(1.5, config=config), config) == 4
    # A core already fragmented keeps serving even at the cap.
    loaded = node_with_free({0: 50, 1: 50, 2: 50, **{core: 100 for core in range(3, 10)}})
    assert node_capacity(loaded, bind(1.5, config=config), config) == 3


def test_memory_prime_capacity() -> None:
    node = NodeResources("n", {str(core): 100 for core in range(4)}, 10 * GIB, used_memory=GIB)
    request = normalize_request({"cpu_request": 2, "memory_request": "2GiB"}, CONFIG)
    assert node_capacity(node, request, CONFIG) == 4
    too_many_cores = normalize_request({"cpu_request": 5, "memory_request": GIB}, CONFIG)
    assert node_capacity(node, too_many_cores, CONFIG) == 0
    unbounded = normalize_request({"cpu_request": 1}, CONFIG)
    assert node_capacity(node, unbounded, PlanningConfig(max_deploy_count=77)) == 77


def test_charge_then_release_restores_usage() -> None:
    node = node_with_free({core: 100 for core in range(4)})
    request = bind(1.5, GIB)
    plans = materialize([node], request, CONFIG, {"n": 2})
    charged = charge(node, plans)
    assert node_capacity(charged, request, CONFIG) == 0
    restored = release(release(charged, plans[0]), plans[1])
    assert restored.used_memory == 0
    assert all(restored.used_cpu_map.get(core, 0) == node.used_cpu_map.get(core, 0) for core in node.cpu_map)


def test_plan_deploy_auto_and_shortage_numbers() -> None:
    nodes = [node_with_free({core: 100 for core in range(4)}, name=f"n{index}") for index in range(3)]
    plan = plan_deploy(nodes, bind(1.5, GIB), CONFIG, mode="auto", count=5)
    assert plan.capacities == {"n0": 2, "n1": 2, "n2": 2}
    assert plan.placements == {"n0": 2, "n1": 2, "n2": 1}
    assert [container.node for container in plan.containers] == ["n0", "n0", "n1", "n1", "n2"]
    with pytest.raises(PlanningFailure) as failure:
        plan_deploy(nodes, bind(1.5, GIB), CONFIG, mode="auto", count=7)
    assert "6" in failure.value.message or failure.value.details


def test_plans_do_not_depend_on_the_order_cores_are_listed_in() -> None:
    listed = node_with_free({core: 100 if core % 3 else 60 for core in range(12)})
    reversed_node = NodeResources(
        "n", dict(reversed(list(listed.cpu_map.items()))), listed.memory, used_cpu_map=listed.used_cpu_map
    )
    request = bind(1.4)
    capacity = node_capacity(listed, request, CONFIG)
    assert capacity == node_capacity(reversed_node, request, CONFIG) == 6
    assert materialize([listed], request, CONFIG, {"n": capacity}) == materialize(
        [reversed_node], request, CONFIG, {"n": capacity}
    )
    # Fragments from the loaded cores 0, 3, 6, 9 and core 1 (converted); whole cores in numeric id order ("10" > "9").
    plans = materialize([listed], request, CONFIG, {"n": capacity})
    assert [dict(plan.cpu_map) for plan in plans] == [
        {"2": 100, "0": 40},
        {"4": 100, "3": 40},
        {"5": 100, "6": 40},
        {"7": 100, "9": 40},
        {"8": 100, "1": 40},
        {"10": 100, "1": 40},
    ]


def test_fragments_come_from_an_existing_fragment_source_before_an_idle_core() -> None:
    # Core 1 is oversold (160 free, not a multiple of 100): it already serves fragments, so core 0 stays whole until
    # core 1 cannot give another 50 pieces, although core 0 has fewer free pieces (docs/planning.md).
    node = node_with_free({0: 100, 1: 160})
    assert node_capacity(node, bind(0.5), CONFIG) == 5
    first = materialize([node], bind(0.5), CONFIG, {"n": 1})
    assert [dict(plan.cpu_map) for plan in first] == [{"1": 50}]
    every = materialize([node], bind(0.5), CONFIG, {"n": 5})
    assert [dict(plan.cpu_map) for plan in every] == [{"1": 50}, {"1": 50}, {"1": 50}, {"0": 50}, {"0": 50}]
