"""A sim process's command group under access control (eru.bus.node_groups, eru.bus.access): with a plain nats
client and a node-agent's own credentials, it pulls exactly its nodes' commands and its group's batches from the
consumer the stack provisioned, and can neither read another group's or node's commands, point its own consumer at
them, nor publish a group's batch (only the allocator does); it dead-letters only its own group's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from nats.js.errors import NotFoundError

from eru.bus.access import make_account, node_agent_durable
from eru.bus.connection import settle
from eru.bus.consumer import ConsumerOptions, consumer_config, ensure_consumer
from eru.bus.node_groups import ensure_group_consumer, group_consumer, group_durable
from eru.bus.streams import NODE, provision_streams
from eru.bus.subjects import group_command, group_heartbeats, group_inventories, group_results
from eru.errors import InvalidInput
from eru.testing.nats_server import NatsServer
from eru.testing.secured_nats import AccountClient, Connect, account_clients, secured_nats_server

G1_NODES = ["g1-001", "g1-002"]
G2_NODES = ["g2-001"]
ACCOUNTS = {
    "admin": make_account("admin", "admin", "admin-secret"),
    "g1": make_account("node-agent", "agent-g1", "g1-secret", nodes=G1_NODES, command_group="g1"),
    "g2": make_account("node-agent", "agent-g2", "g2-secret", nodes=G2_NODES, command_group="g2"),
    "solo": make_account("node-agent", "agent-solo", "solo-secret", nodes=["solo"]),
}


@pytest.fixture
def secured_server(tmp_path: Path) -> Iterator[NatsServer]:
    with secured_nats_server(ACCOUNTS.values(), tmp_path) as server:
        yield server


@pytest_asyncio.fixture
async def connect_as(secured_server: NatsServer) -> AsyncIterator[Connect]:
    async with account_clients(secured_server, ACCOUNTS) as connect:
        yield connect


async def _provisioned(admin: AccountClient) -> Any:
    js = admin.nc.jetstream()
    await provision_streams(js)
    await ensure_group_consumer(js, "g1", G1_NODES)
    await ensure_group_consumer(js, "g2", G2_NODES)
    for node in ("g1-001", "g1-002", "g2-001", "solo"):
        await js.publish(f"eru.node.{node}.cmd.create", f"for {node}".encode())
    for group in ("g1", "g2"):  # a batch of the group's nodes in one message (the allocator's)
        await js.publish(group_command(group), f"for group {group}".encode())
    return js


async def test_a_group_agent_pulls_exactly_its_nodes_commands(connect_as: Connect) -> None:
    admin, agent = await connect_as("admin"), await connect_as("g1")
    admin_js = await _provisioned(admin)
    js = agent.nc.jetstream(timeout=2)
    durable, filters, options = group_consumer("g1", G1_NODES)
    # the agent's own ensure finds the provisioned consumer identical: it binds without asking to create anything
    await ensure_consumer(js, NODE, durable, filters, options)
    subscription = await js.pull_subscribe_bind(durable=durable, stream=NODE)
    messages = await subscription.fetch(10, timeout=2)
    assert sorted(m.data for m in messages) == [b"for g1-001", b"for g1-002", b"for group g1"]
    for message in messages:
        await message.ack()
    await settle(agent.nc)
    info = await admin_js.consumer_info(NODE, durable)
    assert (info.num_ack_pending, info.num_pending) == (0, 0)
    assert agent.errors == []


async def test_a_group_agent_cannot_read_another_groups_or_nodes_commands(connect_as: Connect) -> None:
    admin, agent = await connect_as("admin"), await connect_as("g1")
    admin_js = await _provisioned(admin)
    await ensure_consumer(admin_js, NODE, node_agent_durable("solo"), "eru.node.solo.cmd.*", ConsumerOptions())
    js = agent.nc.jetstream(timeout=1)
    # pulling from g2's group or the node `solo`'s own consumer: refused
    for durable in (group_durable("g2"), node_agent_durable("solo")):
        subscription = await js.pull_subscribe_bind(durable=durable, stream=NODE)
        with pytest.raises(Exception):  # noqa: B017, PT011 - the server drops the request: nats-py times out
            await subscription.fetch(1, timeout=1)
        assert await agent.denied(f'"$JS.API.CONSUMER.MSG.NEXT.{NODE}.{durable}"')
    # widening its own group to g2's node, or a new consumer on another node's commands: refused
    durable, filters, options = group_consumer("g1", [*G1_NODES, "g2-001"])
    with pytest.raises(Exception):  # noqa: B017, PT011
        await js.add_consumer(NODE, config=consumer_config(durable, filters, options))
    assert await agent.denied(f'"$JS.API.CONSUMER.CREATE.{NODE}.{durable}"')
    with pytest.raises(Exception):  # noqa: B017, PT011
        await js.add_consumer(NODE, config=consumer_config("mine", "eru.node.g2-001.cmd.*", ConsumerOptions()))
    assert await agent.denied(f'"$JS.API.CONSUMER.CREATE.{NODE}.mine.eru.node.g2-001.cmd.*"')
    # nor delete its group (which the stack provisioned)
    with pytest.raises(Exception):  # noqa: B017, PT011
        await js.delete_consumer(NODE, group_durable("g1"))
    assert await agent.denied(f'"$JS.API.CONSUMER.DELETE.{NODE}.{group_durable("g1")}"')
    # and the group's consumer is as the stack made it: g1's nodes only, g2's command still waiting for g2
    info = await admin_js.consumer_info(NODE, group_durable("g1"))
    assert info.config.filter_subjects == ["eru.group.g1.cmd.batch", "eru.node.g1-001.cmd.*", "eru.node.g1-002.cmd.*"]
    assert (await admin_js.consumer_info(NODE, group_durable("g2"))).num_pending == 2


async def test_a_group_agent_cannot_publish_a_groups_batch_and_dead_letters_only_its_own(connect_as: Connect) -> None:
    admin, agent = await connect_as("admin"), await connect_as("g1")
    admin_js = await _provisioned(admin)
    # a batch for another group's nodes (or its own: only the allocator sends them) is refused, and never stored
    for group in ("g2", "g1"):
        await agent.nc.publish(group_command(group), b"forged")
        assert await agent.denied(f'"{group_command(group)}"')
    await settle(agent.nc)
    assert (await admin_js.consumer_info(NODE, group_durable("g2"))).num_pending == 2
    assert (await admin_js.consumer_info(NODE, group_durable("g1"))).num_pending == 3
    # it dead-letters a batch of its own group it cannot run, not another group's
    await agent.nc.publish(f"eru.dlq.{group_command('g2')}", b"forged")
    assert await agent.denied(f'"eru.dlq.{group_command("g2")}"')
    await agent.nc.publish(f"eru.dlq.{group_command('g1')}", b"refused")
    await settle(agent.nc)
    assert not await agent.denied(f'"eru.dlq.{group_command("g1")}"', within=0.5)
    dead = await admin_js.get_last_msg("ERU_DLQ", f"eru.dlq.{group_command('g1')}")
    assert dead.data == b"refused"


@pytest.mark.parametrize(
    ("subject_of", "stream"),
    [(group_results, "ERU_EVENTS"), (group_inventories, "ERU_METRICS"), (group_heartbeats, "ERU_METRICS")],
)
async def test_a_group_agent_reports_on_its_own_groups_subjects_only(
    connect_as: Connect, subject_of: Callable[[str], str], stream: str
) -> None:
    admin, agent = await connect_as("admin"), await connect_as("g1")
    admin_js = await _provisioned(admin)
    await agent.nc.publish(subject_of("g2"), b"forged")
    assert await agent.denied(f'"{subject_of("g2")}"')
    await agent.nc.publish(subject_of("g1"), b"report")
    await settle(agent.nc)
    stored = await admin_js.get_last_msg(stream, subject_of("g1"))  # its own: stored for the allocator
    assert stored.data == b"report"
    with pytest.raises(NotFoundError):  # another group's: never stored
        await admin_js.get_last_msg(stream, subject_of("g2"))


async def test_a_node_agent_of_single_nodes_cannot_use_any_group(connect_as: Connect) -> None:
    admin, solo = await connect_as("admin"), await connect_as("solo")
    await _provisioned(admin)
    js = solo.nc.jetstream(timeout=1)
    subscription = await js.pull_subscribe_bind(durable=group_durable("g1"), stream=NODE)
    with pytest.raises(Exception):  # noqa: B017, PT011 - the server drops the request: nats-py times out
        await subscription.fetch(1, timeout=1)
    assert await solo.denied(f'"$JS.API.CONSUMER.MSG.NEXT.{NODE}.{group_durable("g1")}"')


def test_bad_groups_are_named() -> None:
    with pytest.raises(InvalidInput, match="command_group"):
        make_account("operator", "operator", "x", command_group="g1")
    with pytest.raises(InvalidInput, match="command_group"):
        group_durable("a.b")
    with pytest.raises(InvalidInput, match="nodes"):
        group_consumer("g1", [])
