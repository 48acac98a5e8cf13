"""Capacity from the kernel's files, node and container usage from counters (pure)."""

from __future__ import annotations

import pytest

from eru.errors import InvalidInput
from eru.nodeagent.capacity import (
    cores_busy_between,
    memory_used,
    node_capacity,
    parse_meminfo,
    parse_proc_stat,
)
from eru.nodeagent.metrics import cpu_cores_between, cpu_counters, memory_in_use, throttling_between

GiB = 1024**3
MEMINFO = (
    "MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    6000000 kB\nHugePages_Total:       0\n"
)


def test_meminfo_in_bytes_and_memory_used() -> None:
    values = parse_meminfo(MEMINFO)
    assert values["MemTotal"] == 16_000_000 * 1024
    assert values["HugePages_Total"] == 0
    assert memory_used(values) == 10_000_000 * 1024
    numa = parse_meminfo("Node 1 MemTotal:       8000000 kB\nNode 1 MemFree: 10 kB\n")
    assert numa["MemTotal"] == 8_000_000 * 1024


def test_capacity_is_cores_times_share_base_and_80_percent_of_memtotal() -> None:
    capacity = node_capacity(cores=["0", "1", "2", "3"], mem_total=10 * GiB, share_base=100, memory_fraction=0.8)
    assert capacity.cpu_map == {"0": 100, "1": 100, "2": 100, "3": 100}
    assert capacity.memory == 8 * GiB
    assert capacity.numa == {}


def test_numa_layout_when_there_are_several_numa_nodes() -> None:
    capacity = node_capacity(
        cores=[str(i) for i in range(4)],
        mem_total=8 * GiB,
        share_base=1000,
        memory_fraction=0.5,
        numa_cpulists={"0": "0-1\n", "1": "2-3\n"},
        numa_mem_totals={"0": 4 * GiB, "1": 4 * GiB},
    )
    assert capacity.cpu_map["3"] == 1000
    assert capacity.numa == {"0": "0", "1": "0", "2": "1", "3": "1"}
    assert capacity.numa_memory == {"0": 2 * GiB, "1": 2 * GiB}
    single = node_capacity(
        cores=["0", "1"], mem_total=GiB, share_base=100, memory_fraction=0.8, numa_cpulists={"0": "0-1"}
    )
    assert single.numa == {}


def test_overrides_replace_what_the_engine_reports() -> None:
    capacity = node_capacity(
        cores=["0", "1", "2", "3"], mem_total=10 * GiB, share_base=100, memory_fraction=0.8, cpu_cores=2, memory=GiB
    )
    assert capacity.cpu_map == {"0": 100, "1": 100}
    assert capacity.memory == GiB
    with pytest.raises(InvalidInput) as error:
        node_capacity(cores=[], mem_total=GiB, share_base=100, memory_fraction=0.8)
    assert error.value.field == "cores"


def test_node_cpu_from_proc_stat() -> None:
    before = parse_proc_stat("cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 2 3 4\n")
    after = parse_proc_stat("cpu  250 0 150 1000 0 0 0 0 0 0\n")
    # 200 busy jiffies out of 400 on 2 CPUs = 1 core
    assert cores_busy_between(before, after, 2) == pytest.approx(1.0)
    assert cores_busy_between(after, after, 2) == 0.0
    with pytest.raises(InvalidInput):
        parse_proc_stat("intr 1 2 3")


def stats(usage: int, system: int, throttled: int = 0, throttled_ns: int = 0, cpus: int = 2) -> dict[str, object]:
    return {
        "cpu_stats": {
            "cpu_usage": {"total_usage": usage},
            "system_cpu_usage": system,
            "online_cpus": cpus,
            "throttling_data": {"periods": 10, "throttled_periods": throttled, "throttled_time": throttled_ns},
        },
        "memory_stats": {"usage": 50_000_000, "stats": {"total_inactive_file": 10_000_000}},
    }


def test_container_cpu_in_cores_from_two_readings() -> None:
    first = cpu_counters(stats(1_000_000_000, 10_000_000_000))
    second = cpu_counters(stats(2_000_000_000, 12_000_000_000, throttled=5, throttled_ns=300_000_000))
    assert first is not None
    assert second is not None
    # 1 s of container CPU while the host's CPUs (2 of them) accumulated 2 s, i.e. 1 s of wall time: 1 core
    assert cpu_cores_between(first, second) == pytest.approx(1.0)
    assert throttling_between(first, second) == (5, pytest.approx(0.3))
    assert cpu_cores_between(second, first) == 0.0
    assert throttling_between(second, first) == (0, 0.0)
    assert cpu_counters({"cpu_stats": {}}) is None


def test_memory_excludes_inactive_page_cache() -> None:
    assert memory_in_use(stats(0, 0)) == 40_000_000
    assert memory_in_use({"memory_stats": {"usage": 100, "stats": {"inactive_file": 30}}}) == 70
    assert memory_in_use({}) == 0
