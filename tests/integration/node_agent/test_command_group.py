"""A sim process's nodes served through one command consumer (eru_node_agent.group, eru.bus.node_groups), over a real
nats-server: single commands and batches reach the node their subject names, a forged body is dead-lettered, a
command for a node still starting waits for it, and no per-node consumer is made."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from agent_helpers import Collector, create, send, workload

from eru.bus import new_envelope, new_id, provision_streams, publish
from eru.bus.delivery import Delivery
from eru.bus.errors import Permanent
from eru.bus.node_groups import group_durable
from eru.bus.streams import NODE
from eru.bus.subjects import node_command
from eru.domain.messages import ContainerEvent, ContainerEvents, NodeCommand, NodeCommands, NodeRegistration
from eru.domain.resources import Allocation
from eru.errors import InvalidInput
from eru.settings import load_settings
from eru_node_agent.agent import NodeAgent
from eru_node_agent.app import build_agents
from eru_node_agent.group import CommandGroup

MiB = 1024**2


def grouped_agents(js: Any, nodes: int = 3) -> list[NodeAgent]:
    settings = load_settings(
        node_agent={"runtime": "sim", "sim_nodes": nodes, "node": "grp", "command_group": "grp"},
    )
    return build_agents(settings, js)


@pytest_asyncio.fixture
async def serving(js: Any, nc: Any) -> AsyncIterator[list[NodeAgent]]:
    """Three grouped sim nodes running as `service_main` runs them: the group consumer first, then the nodes."""
    await provision_streams(js)
    registrations = await Collector(NodeRegistration).start(nc, "eru.node.*.registered")
    agents = grouped_agents(js)
    stop = asyncio.Event()
    group = CommandGroup("grp", agents, js, stop)
    await group.ensure()
    tasks = [asyncio.create_task(agent.run(stop, own_reports=False)) for agent in agents]
    tasks.append(asyncio.create_task(group.run()))
    try:
        await registrations.wait_for(lambda _: len(registrations.items) == 3)
        yield agents
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)


async def test_commands_reach_the_node_their_subject_names_through_one_consumer(
    serving: list[NodeAgent], js: Any, nc: Any
) -> None:
    events = await Collector(ContainerEvent).start(nc, "eru.container.*.started")
    batches = await Collector(ContainerEvents).start(nc, "eru.container.*.batch")
    single = create("grp-002", workload("sim"), Allocation(memory=MiB))
    await send(js, single)
    batch = NodeCommands(
        batch_id=new_id(),
        node="grp-003",
        commands=[create("grp-003", workload("sim"), Allocation(memory=MiB)) for _ in range(2)],
    )
    envelope = new_envelope("eru.node.cmd.batch", "test", message_id=batch.batch_id)
    await publish(js, node_command("grp-003", "batch"), batch, envelope)
    started = await events.wait_for(lambda e: e.command_id == single.command_id)
    assert (started.node, started.kind) == ("grp-002", "started")
    answer = await batches.wait_for(lambda b: b.node == "grp-003")
    assert [e.kind for e in answer.events] == ["started", "started"]
    assert {a.node: len(a.state.containers) for a in serving} == {"grp-001": 0, "grp-002": 1, "grp-003": 2}
    names = [info.name async for info in _consumers(js)]
    assert names == [group_durable("grp")]  # no consumer per node


async def test_a_body_naming_another_node_than_its_subject_is_dead_lettered(
    serving: list[NodeAgent], js: Any, nc: Any
) -> None:
    dead = await Collector(NodeCommand).start(nc, "eru.dlq.eru.node.grp-001.cmd.create")
    forged = create("grp-002", workload("sim"), Allocation(memory=MiB))
    await send(js, forged, subject_node="grp-001")
    assert (await dead.wait_for(lambda c: c.command_id == forged.command_id)).node == "grp-002"
    reason = next(headers for _, _, headers in dead.items)["Eru-Dlq-Reason"]
    assert "delivered to the agent of node 'grp-001'" in reason
    assert all(not a.state.containers for a in serving)


async def test_a_command_for_a_node_still_starting_waits_for_its_start(js: Any) -> None:
    await provision_streams(js)
    agents = grouped_agents(js, nodes=2)
    group = CommandGroup("grp", agents, js, asyncio.Event())
    command = create("grp-002", workload("sim"), Allocation(memory=MiB))
    delivery = _delivery(node_command("grp-002", "create"))
    handled = asyncio.create_task(group.handle(_root(command), new_envelope("eru.node.cmd.create", "t"), delivery))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not handled.done()  # waiting: the node has no executor yet
    await agents[1].start()
    agents[1].started.set()
    await handled
    assert command.container_id in agents[1].state.containers
    with pytest.raises(Permanent, match="no node of command group"):
        await group.handle(_root(command), new_envelope("eru.node.cmd.create", "t"), _delivery("eru.node.x.cmd.create"))


def test_a_command_group_needs_the_sim_runtime() -> None:
    settings = load_settings(node_agent={"runtime": "docker", "node": "h", "command_group": "h"})
    with pytest.raises(InvalidInput, match=r"node_agent\.command_group"):
        build_agents(settings, js=None)


async def _consumers(js: Any) -> AsyncIterator[Any]:
    for info in await js.consumers_info(NODE):
        yield info


def _root(command: Any) -> Any:
    from eru.domain.messages import NodeCommandMessage

    return NodeCommandMessage(command)


def _delivery(subject: str) -> Delivery:
    from datetime import UTC, datetime

    return Delivery(
        subject=subject,
        stream=NODE,
        consumer=group_durable("grp"),
        stream_sequence=1,
        deliveries=1,
        pending=0,
        timestamp=datetime.now(UTC),
        headers={},
        content_type="application/msgpack",
        reply_to=None,
    )
