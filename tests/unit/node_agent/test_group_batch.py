"""A command group's batch (`eru.group.<group>.cmd.batch`, eru_node_agent.group): each node's part runs exactly as
that node's own message would, every node's results are answered in one `GroupEvents` on `eru.group.<group>.results`
in the order of the batch, a redelivery runs nothing twice and publishes only what was not reported, and a batch
naming a node the process does not serve, or of another group, is refused whole before anything runs. The bus is a
fake JetStream that records what is published."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_batch_progress import FakeJetStream

from eru.bus import Delivery, Permanent, decode, encode, new_envelope
from eru.bus.node_groups import group_durable
from eru.bus.streams import NODE
from eru.bus.subjects import group_command
from eru.domain.messages import (
    ContainerSpec,
    GroupCommands,
    GroupEvents,
    NodeCommand,
    NodeCommandMessage,
    Workload,
)
from eru.domain.resources import Allocation
from eru.settings import load_settings
from eru.testing.deliveries import delivery as fake_delivery
from eru_node_agent.agent import NodeAgent
from eru_node_agent.app import build_agents
from eru_node_agent.config import result_id
from eru_node_agent.group import CommandGroup

MiB = 1024**2
WORKLOAD = Workload(name="w", image="sim")


def create(node: str, index: int) -> NodeCommand:
    cid = f"{node}-c{index}"
    spec = ContainerSpec(container_id=cid, deploy_id="d1", workload=WORKLOAD, allocation=Allocation(memory=MiB))
    return NodeCommand(command_id=f"k-{cid}", node=node, kind="create", container_id=cid, spec=spec)


def delivery(subject: str, deliveries: int = 1) -> Delivery:
    return fake_delivery(subject, stream=NODE, consumer=group_durable("grp"), deliveries=deliveries)


class FailingOnce(FakeJetStream):
    """The first publication of a group's results fails (the bus away), the later ones are recorded."""

    failed = False

    async def publish(self, subject: str, payload: bytes, **options: Any) -> None:
        if subject.endswith(".results") and not self.failed:
            self.failed = True
            raise ConnectionError("the bus is away")
        await super().publish(subject, payload, **options)


def wire(batch: GroupCommands) -> NodeCommandMessage:
    """The batch as the group's consumer decodes it (through its compact wire form)."""
    return decode(encode(batch), NodeCommandMessage)


async def started_group(js: FakeJetStream, nodes: int = 3) -> tuple[CommandGroup, list[NodeAgent]]:
    settings = load_settings(node_agent={"runtime": "sim", "sim_nodes": nodes, "node": "grp", "command_group": "grp"})
    agents = build_agents(settings, js)
    for agent in agents:
        await agent.start()
        agent.started.set()
    js.published.clear()
    return CommandGroup("grp", agents, js, asyncio.Event()), agents  # type: ignore[arg-type]


async def test_each_nodes_part_runs_as_its_own_message_would_and_a_redelivery_runs_nothing_twice() -> None:
    js = FakeJetStream()
    group, agents = await started_group(js)
    lone, pair = create("grp-001", 0), [create("grp-003", 0), create("grp-003", 1)]
    batch = GroupCommands(batch_id="g1", group="grp", commands=[pair[0], lone, pair[1]])
    message = wire(batch)
    assert isinstance(message.root, GroupCommands)
    assert message.root.parts() == {"grp-003": pair, "grp-001": [lone]}
    envelope = new_envelope("eru.group.cmd.batch", "test", message_id="g1")
    await group.handle(message, envelope, delivery(group_command("grp")))

    assert [subject for subject, _, _ in js.published] == ["eru.group.grp.results"]  # one answer for the batch
    _, body, headers = js.published[0]
    answer = decode(body, GroupEvents)
    assert answer.group == "grp"
    assert [(e.node, e.command_id, e.kind) for e in answer.events] == [
        ("grp-003", pair[0].command_id, "started"),
        ("grp-001", lone.command_id, "started"),
        ("grp-003", pair[1].command_id, "started"),
    ]
    assert headers["Nats-Msg-Id"] == result_id("grp.results", "g1")  # derived from the batch: a repeat is dropped
    assert {a.node: sorted(a.state.containers) for a in agents} == {
        "grp-001": [lone.container_id],
        "grp-002": [],
        "grp-003": sorted(c.container_id for c in pair),
    }

    created = {a.node: dict(a.state.containers) for a in agents}
    js.published.clear()
    await group.handle(message, envelope, delivery(group_command("grp"), deliveries=2))
    assert {a.node: dict(a.state.containers) for a in agents} == created  # nothing ran again
    assert js.published == []  # every result was reported: nothing to send again


async def test_a_failed_publication_is_sent_again_by_the_redelivery_without_running_anything_twice() -> None:
    js = FailingOnce()
    group, agents = await started_group(js)
    batch = GroupCommands(batch_id="g4", group="grp", commands=[create("grp-001", 0), create("grp-002", 0)])
    envelope = new_envelope("eru.group.cmd.batch", "test", message_id="g4")
    with pytest.raises(ConnectionError, match="the bus is away"):
        await group.handle(wire(batch), envelope, delivery(group_command("grp")))
    created = {a.node: dict(a.state.containers) for a in agents}
    assert sum(len(c) for c in created.values()) == 2  # both ran before the bus failed

    await group.handle(wire(batch), envelope, delivery(group_command("grp"), deliveries=2))
    assert {a.node: dict(a.state.containers) for a in agents} == created  # nothing ran again
    answer = decode(js.published[-1][1], GroupEvents)
    assert [e.command_id for e in answer.events] == [c.command_id for c in batch.commands]
    assert js.published[-1][2]["Nats-Msg-Id"] == result_id("grp.results", "g4")


@pytest.mark.parametrize(
    ("subject", "commands", "reason"),
    [
        ("eru.group.grp.cmd.batch", [create("grp-001", 0), create("other-001", 0)], r"commands\[1\]\.node 'other-001'"),
        ("eru.group.grp.cmd.batch", [create("grp-001", 0), create("grp-009", 0)], r"commands\[1\]\.node 'grp-009'"),
        ("eru.group.other.cmd.batch", [create("grp-001", 0)], "is not command group 'grp'"),
    ],
)
async def test_a_batch_naming_a_node_the_process_does_not_serve_is_refused_whole(
    subject: str, commands: list[NodeCommand], reason: str
) -> None:
    js = FakeJetStream()
    group, agents = await started_group(js)
    batch = GroupCommands(batch_id="g2", group="grp", commands=commands)
    with pytest.raises(Permanent, match=reason):
        await group.handle(wire(batch), new_envelope("eru.group.cmd.batch", "t"), delivery(subject))
    assert all(not a.state.containers for a in agents)
    assert not js.published


async def test_a_group_batch_on_a_node_subject_and_a_node_batch_body_on_the_group_subject_are_refused() -> None:
    js = FakeJetStream()
    group, agents = await started_group(js)
    batch = GroupCommands(batch_id="g3", group="grp", commands=[create("grp-001", 0)])
    with pytest.raises(Permanent, match="delivered to the agent of node 'grp-001'"):
        await group.handle(wire(batch), new_envelope("t", "t"), delivery("eru.node.grp-001.cmd.batch"))
    single: Any = NodeCommandMessage(create("grp-001", 1))
    with pytest.raises(Permanent, match="the message is not one"):
        await group.handle(single, new_envelope("t", "t"), delivery(group_command("grp")))
    assert all(not a.state.containers for a in agents)
    assert not js.published
