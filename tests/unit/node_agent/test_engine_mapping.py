"""The plan → engine mapping (docs/planning.md): cpuset, shares, quota, memory, labels."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eru.domain.messages import ContainerSpec, Workload
from eru.domain.resources import Allocation, ResourceRequest
from eru.errors import InvalidInput
from eru.nodeagent.engine import (
    L_ALLOCATION,
    container_labels,
    engine_resources,
    format_cpuset,
    managed_container,
    parse_cpuset,
)

CORES = [str(i) for i in range(8)]
MiB = 1024**2


def test_seed_example_one_whole_core_and_a_fragment_of_seventy_pieces() -> None:
    resources = engine_resources(Allocation(cpu_map={"3": 100, "5": 70}, memory=512 * MiB, cpu_bind=True), CORES)
    assert parse_cpuset(resources.cpuset_cpus) == {"3", "5"}
    assert resources.cpu_shares == 1024 * 70 // 100
    assert resources.cpu_quota == -1  # cpuset and shares do the work, no CFS quota
    assert resources.memory == 512 * MiB
    assert resources.host_config()["MemorySwap"] == 512 * MiB  # no swap beyond the limit
    assert resources.host_config()["CpuQuota"] == 0


def test_whole_cores_only_keep_default_shares_and_share_base_1000_is_proportional() -> None:
    assert engine_resources(Allocation(cpu_map={"0": 100, "1": 100}), CORES).cpu_shares == 1024
    fine = engine_resources(Allocation(cpu_map={"2": 1}, share_base=1000), CORES)
    assert fine.cpu_shares == 2  # the kernel's minimum
    assert engine_resources(Allocation(cpu_map={"2": 500}, share_base=1000), CORES).cpu_shares == 512


def test_memory_prime_gets_every_core_and_a_cfs_quota_of_its_limit() -> None:
    resources = engine_resources(Allocation(cpu_limit=1.5, memory=256 * MiB), CORES)
    assert resources.cpuset_cpus == "0-7"
    assert resources.cpu_quota == 150_000
    assert resources.cpu_period == 100_000
    unlimited = engine_resources(Allocation(memory=256 * MiB), CORES)
    assert unlimited.cpu_quota == -1
    assert unlimited.update_body()["CpuQuota"] == -1  # -1 lifts a quota in place; 0 would mean "unchanged"


def test_memory_soft_sets_a_reservation_and_no_hard_limit() -> None:
    soft = engine_resources(Allocation(memory=64 * MiB, memory_limit=128 * MiB, memory_soft=True), CORES)
    assert soft.memory == 0
    assert soft.memory_reservation == 128 * MiB
    assert "Memory" not in soft.update_body()
    hard = engine_resources(Allocation(memory=64 * MiB), CORES)
    assert hard.memory == 64 * MiB
    assert hard.update_body()["Memory"] == hard.update_body()["MemorySwap"] == 64 * MiB


def test_numa_node_pins_memory() -> None:
    resources = engine_resources(Allocation(cpu_map={"0": 100}, numa_node="1"), CORES)
    assert resources.host_config()["CpusetMems"] == "1"


@pytest.mark.parametrize(
    ("allocation", "field"),
    [
        (Allocation(cpu_map={"0": 30, "1": 40}), "allocation.cpu_map"),
        (Allocation(cpu_map={"9": 100}), "allocation.cpu_map"),
        (Allocation(cpu_map={"0": 130}), "allocation.cpu_map.0"),
        (Allocation(cpu_bind=True), "allocation.cpu_map"),
        (Allocation(cpu_map={"0": 100}, numa_node="x"), "allocation.numa_node"),
        (Allocation(cpu_limit=-1), "allocation.cpu_limit"),
    ],
)
def test_bad_allocations_name_the_field(allocation: Allocation, field: str) -> None:
    with pytest.raises(InvalidInput) as error:
        engine_resources(allocation, CORES)
    assert error.value.field == field


@settings(max_examples=100)
@given(
    whole=st.sets(st.integers(0, 63), max_size=8),
    fragment=st.one_of(st.none(), st.tuples(st.integers(64, 127), st.integers(1, 99))),
)
def test_cpuset_is_exactly_the_plan_and_shares_follow_the_fragment(
    whole: set[int], fragment: tuple[int, int] | None
) -> None:
    cpu_map = {str(core): 100 for core in whole}
    if fragment is not None:
        cpu_map[str(fragment[0])] = fragment[1]
    if not cpu_map:
        return
    resources = engine_resources(Allocation(cpu_map=cpu_map), [str(i) for i in range(128)])
    assert parse_cpuset(resources.cpuset_cpus) == set(cpu_map)
    expected = max(2, 1024 * fragment[1] // 100) if fragment else 1024
    assert resources.cpu_shares == expected


def test_cpuset_text_round_trips() -> None:
    assert format_cpuset(["5", "0", "1", "2", "10", "11"]) == "0-2,5,10-11"
    assert parse_cpuset("0-2,5,10-11") == {"0", "1", "2", "5", "10", "11"}
    with pytest.raises(InvalidInput):
        parse_cpuset("3-1")
    with pytest.raises(InvalidInput):
        format_cpuset(["a"])


def spec(**workload_fields: object) -> ContainerSpec:
    workload = Workload.model_validate(
        {
            "name": "web",
            "image": "img",
            "resources": ResourceRequest(cpu_bind=True, cpu_request=1.7, memory_request=64 * MiB),
            "priority_class": "batch",
            "priority": 4,
            "tenant": "acme",
            **workload_fields,
        }
    )
    return ContainerSpec(
        container_id="c1", deploy_id="d1", workload=workload, allocation=Allocation(cpu_map={"0": 100, "1": 70})
    )


def test_labels_carry_everything_the_agent_needs_to_rebuild() -> None:
    labels = container_labels(spec(labels={"team": "x"}), "node-1")
    assert labels["team"] == "x"
    managed = managed_container(labels)
    assert managed is not None
    assert (managed.container_id, managed.node, managed.deploy_id, managed.workload) == ("c1", "node-1", "d1", "web")
    assert (managed.priority_class, managed.priority, managed.tenant) == ("batch", 4, "acme")
    assert managed.cpu_request == 1.7
    assert managed.memory_request == 64 * MiB
    assert managed.allocation == Allocation(cpu_map={"0": 100, "1": 70})


def test_a_workload_cannot_forge_eru_labels_and_damaged_labels_are_not_eru_s() -> None:
    with pytest.raises(InvalidInput) as error:
        container_labels(spec(labels={"eru.node": "other"}), "node-1")
    assert error.value.field == "workload.labels.eru.node"
    labels = container_labels(spec(), "node-1")
    assert managed_container({**labels, L_ALLOCATION: "{broken"}) is None
    assert managed_container({"com.example": "1"}) is None
