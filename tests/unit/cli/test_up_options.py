"""`eru up`'s sizing options: replica counts per service and the size of each sim node, each bad value refused with
the option's name (docs/replicas.md)."""

from __future__ import annotations

import pytest

from eru.cli.up_options import parse_replicas, parse_sim_node_cpus, parse_sim_node_memory
from eru.errors import InvalidInput
from eru.stack.launch import split_nodes


def test_replicas_per_service() -> None:
    assert parse_replicas(["allocator=3", "eviction=2", "allocator=2"]) == {"allocator": 2, "eviction": 2}
    assert parse_replicas([" node-agent = 4"]) == {"node-agent": 4}
    assert parse_replicas([]) == {}


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("allocator", "is not SERVICE=N"),
        ("scheduler=2", "unknown service 'scheduler' (services: allocator, distributor, eviction, node-agent)"),
        ("allocator=two", "'two' is not a whole number"),
        ("allocator=0", "between 1 and 32"),
        ("allocator=33", "between 1 and 32"),
        ("allocator=", "'' is not a whole number"),
    ],
)
def test_bad_replicas_name_the_option(value: str, reason: str) -> None:
    with pytest.raises(InvalidInput) as error:
        parse_replicas([value])
    assert error.value.field == "--replicas"
    assert reason in error.value.message


def test_sim_node_size() -> None:
    assert parse_sim_node_cpus(32) == 32
    assert parse_sim_node_cpus(None) is None
    assert parse_sim_node_memory("64GiB") == 64 * 1024**3
    assert parse_sim_node_memory(None) is None
    for cpus in (0, -1, 5000):
        with pytest.raises(InvalidInput, match=r"^--sim-node-cpus: .* between 1 and 4096"):
            parse_sim_node_cpus(cpus)
    with pytest.raises(InvalidInput, match=r"^--sim-node-memory: cannot read 'lots'"):
        parse_sim_node_memory("lots")
    with pytest.raises(InvalidInput, match=r"^--sim-node-memory: '1MiB' is below the least of 64MiB"):
        parse_sim_node_memory("1MiB")


def test_sim_nodes_split_between_agents() -> None:
    assert split_nodes(10, 3) == [4, 3, 3]
    assert split_nodes(1000, 4) == [250, 250, 250, 250]
    assert sum(split_nodes(5000, 7)) == 5000


def test_ready_timeout_must_be_positive_and_at_most_a_day() -> None:
    from eru.cli.up_options import parse_ready_timeout

    assert parse_ready_timeout(300) == 300
    for bad in (0, -1, 86_401):
        with pytest.raises(InvalidInput) as caught:
            parse_ready_timeout(bad)
        assert caught.value.field == "--ready-timeout"
