"""Which creates travel together (eru_allocator.deploy.creates.command_messages, eru_allocator.nodes.groups): the
nodes of a command group heard in its heartbeats get one `GroupCommands` per group and transaction; a node of no
group, a group with one node in the transaction, and a node not heard lately keep their per-node messages."""

from __future__ import annotations

from eru.bus import new_envelope
from eru.bus.codec import decode, encode
from eru.domain import ContainerSpec, GroupCommands, NodeCommand, NodeCommandMessage, NodeCommands, Workload
from eru.domain.resources import Allocation
from eru_allocator.deploy.creates import MAX_COMMANDS_PER_MESSAGE, PlannedCommand, command_messages
from eru_allocator.nodes.groups import FRESH_SECONDS, CommandGroups

CAUSE = new_envelope("eru.deploy.request", "test")
WORKLOAD = Workload(name="w", image="registry.example/one-image")


def planned(node: str, index: int, deploy: str = "d1") -> PlannedCommand:
    cid = f"{node}-{index}"
    spec = ContainerSpec(container_id=cid, deploy_id=deploy, workload=WORKLOAD, allocation=Allocation(memory=1))
    command = NodeCommand(command_id=f"k-{cid}", node=node, kind="create", container_id=cid, spec=spec)
    return PlannedCommand(command, deploy, CAUSE, "test")


def commands(per_node: dict[str, int]) -> dict[str, list[PlannedCommand]]:
    return {node: [planned(node, i) for i in range(count)] for node, count in per_node.items()}


def heard(now: float = 100.0) -> CommandGroups:
    groups = CommandGroups()
    groups.heard("sim1", ["sim1-001", "sim1-002", "sim1-003"], now)
    groups.heard("sim2", ["sim2-001", "sim2-002"], now)
    return groups


def test_the_nodes_of_a_group_go_in_one_message_per_group_the_others_per_node() -> None:
    sent = commands({"sim1-001": 1, "sim1-002": 3, "sim1-003": 1, "sim2-001": 1, "web-1": 2, "web-2": 1})
    messages = command_messages(sent, heard(), now=101.0)
    by_subject = {m.subject: m for m in messages}
    assert sorted(by_subject) == [
        "eru.group.sim1.cmd.batch",
        "eru.node.sim2-001.cmd.create",  # its group has one node in this transaction
        "eru.node.web-1.cmd.batch",
        "eru.node.web-2.cmd.create",
    ]
    batch = by_subject["eru.group.sim1.cmd.batch"].message
    assert isinstance(batch, GroupCommands)
    assert batch.group == "sim1"
    expected = [p.command for node in ("sim1-001", "sim1-002", "sim1-003") for p in sent[node]]
    assert batch.commands == expected  # every command once, each naming its own node
    envelope = by_subject["eru.group.sim1.cmd.batch"].envelope
    assert (envelope.id, envelope.correlation_id, envelope.type) == (batch.batch_id, "d1", "eru.group.cmd.batch")
    assert isinstance(by_subject["eru.node.web-1.cmd.batch"].message, NodeCommands)
    # it survives the wire with the workload once, and decodes as what the group's consumer reads
    decoded = decode(encode(batch), NodeCommandMessage).root
    assert decoded == batch
    assert encode(batch).count(b"registry.example/one-image") == 1


def test_without_groups_heard_lately_every_node_keeps_its_own_message() -> None:
    sent = commands({"sim1-001": 1, "sim1-002": 2})
    stale = command_messages(sent, heard(now=100.0), now=100.0 + FRESH_SECONDS + 1)
    assert sorted(m.subject for m in stale) == ["eru.node.sim1-001.cmd.create", "eru.node.sim1-002.cmd.batch"]
    assert sorted(m.subject for m in command_messages(sent, CommandGroups(), now=0.0)) == sorted(
        m.subject for m in stale
    )


def test_a_large_group_batch_is_cut_at_the_message_bound() -> None:
    nodes = [f"sim1-{i:04d}" for i in range(MAX_COMMANDS_PER_MESSAGE + 5)]
    groups = CommandGroups()
    groups.heard("sim1", nodes, 0.0)
    messages = command_messages(commands(dict.fromkeys(nodes, 1)), groups, now=0.0)
    sizes = [len(m.message.commands) for m in messages if isinstance(m.message, GroupCommands)]
    assert sizes == [MAX_COMMANDS_PER_MESSAGE, 5]
    assert len({m.envelope.id for m in messages}) == 2
