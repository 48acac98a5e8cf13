"""The service's settings → agents: sim nodes, their default load model, and a bad one named at start."""

from __future__ import annotations

import pytest

from eru.domain.messages import ContainerSpec, Workload
from eru.domain.resources import Allocation
from eru.errors import InvalidInput
from eru.nodeagent.engine import container_labels
from eru.settings import load_settings
from eru_node_agent.app import build_agents
from eru_node_agent.runtime.sim import SimRuntime


async def test_sim_nodes_get_the_default_load_model_from_settings() -> None:
    settings = load_settings(
        node_agent={
            "runtime": "sim",
            "sim_nodes": 3,
            "node": "rack",
            "cpu_cores": 4,
            "sim_load": '{"kind": "constant", "cpu": 0.75, "memory": "1MiB"}',
        }
    )
    agents = build_agents(settings, js=None)
    assert [agent.node for agent in agents] == ["rack-001", "rack-002", "rack-003"]
    runtime = agents[1].runtime
    assert isinstance(runtime, SimRuntime)
    spec = ContainerSpec(
        container_id="c", deploy_id="d", workload=Workload(name="w", image="i"), allocation=Allocation()
    )
    await runtime.create(spec, container_labels(spec, "rack-002"), ["0", "1", "2", "3"])
    await runtime.start("c")
    usage = await runtime.usage(["c"], 1.0)
    assert (usage.containers["c"].cpu_used, usage.containers["c"].memory_used) == (0.75, 1024**2)
    assert usage.cpu_capacity == 4.0


def test_a_bad_default_load_model_is_named_at_start() -> None:
    settings = load_settings(node_agent={"runtime": "sim", "sim_load": '{"kind": "step", "steps": []}'})
    with pytest.raises(InvalidInput) as error:
        build_agents(settings, js=None)
    assert error.value.field == "node_agent.sim_load.step.steps"


def test_a_process_of_many_sim_nodes_checks_their_command_consumers_less_often() -> None:
    few = build_agents(load_settings(node_agent={"runtime": "sim", "sim_nodes": 3}), js=None)
    many = build_agents(load_settings(node_agent={"runtime": "sim", "sim_nodes": 101}), js=None)
    assert {(a.consumer_options.fetch_timeout_seconds, a.consumer_options.heal_check_seconds) for a in few} == {
        (1.0, 2.0)
    }
    assert {(a.consumer_options.fetch_timeout_seconds, a.consumer_options.heal_check_seconds) for a in many} == {
        (1.0, 10.0)
    }
