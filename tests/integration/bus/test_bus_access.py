"""Subject permissions enforced by a real nats-server with the generated users (eru.bus.access)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
import pytest_asyncio
from bus_helpers import eventually

from eru.bus.access import client_account, make_account, node_agent_durable, render_server_config
from eru.bus.connection import connect, settle
from eru.bus.consumer import ConsumerOptions, ensure_consumer
from eru.bus.errors import BusUnavailable
from eru.bus.streams import DEPLOY, NODE, provision_streams
from eru.errors import InvalidInput
from eru.testing.nats_server import NatsServer
from eru.testing.secured_nats import AccountClient, Connect, account_clients, secured_nats_server

ACCOUNTS = {
    "admin": make_account("admin", "admin", "admin-secret"),
    "operator": make_account("operator", "operator", "operator-secret"),
    "client": client_account("a", "client-a-secret"),
    "client-b": client_account("b", "client-b-secret"),
    "n1": make_account("node-agent", "agent-n1", "n1-secret", nodes=["n1"]),
    "n2": make_account("node-agent", "agent-n2", "n2-secret", nodes=["n2"]),
    "allocator": make_account("allocator", "allocator", "allocator-secret"),
    "eviction": make_account("eviction", "eviction", "eviction-secret"),
    "distributor": make_account("distributor", "distributor", "distributor-secret"),
}


@pytest.fixture
def secured_server(tmp_path: Path) -> Iterator[NatsServer]:
    with secured_nats_server(ACCOUNTS.values(), tmp_path) as server:
        yield server


@pytest_asyncio.fixture
async def connect_as(secured_server: NatsServer) -> AsyncIterator[Connect]:
    async with account_clients(secured_server, ACCOUNTS) as connect:
        yield connect


async def _collect(conn: AccountClient, subject: str) -> list[str]:
    seen: list[str] = []

    async def record(msg: Any) -> None:
        seen.append(msg.subject)

    await conn.nc.subscribe(subject, cb=record)
    await settle(conn.nc)
    return seen


async def test_wrong_password_is_refused(secured_server: NatsServer) -> None:
    bad = client_account("a", "guess")
    with pytest.raises(Exception, match="Authorization"):
        await nats.connect(bad.url(secured_server.url), allow_reconnect=False, max_reconnect_attempts=0)


async def test_eru_connect_reports_refused_credentials_instead_of_retrying(secured_server: NatsServer) -> None:
    bad = client_account("a", "guess")
    with pytest.raises(BusUnavailable, match=r"refused the connection: .*Authorization Violation"):
        await connect(bad.url(secured_server.url), name="wrong-password", connect_timeout=30)


async def test_node_agent_publishes_only_its_own_nodes_metrics(connect_as: Connect) -> None:
    admin, agent = await connect_as("admin"), await connect_as("n1")
    seen = await _collect(admin, "eru.metrics.>")
    await agent.nc.publish("eru.metrics.n1", b"mine")
    await agent.nc.publish("eru.metrics.n2", b"forged")
    await agent.nc.publish("eru.container.n2.started", b"forged")
    await settle(agent.nc)
    assert await agent.denied('"eru.metrics.n2"')
    assert await agent.denied('"eru.container.n2.started"')
    await eventually(lambda: "eru.metrics.n1" in seen)
    assert seen == ["eru.metrics.n1"]


async def test_node_agent_cannot_read_another_nodes_commands(connect_as: Connect) -> None:
    admin, agent = await connect_as("admin"), await connect_as("n1")
    await provision_streams(admin.nc.jetstream())
    await agent.nc.subscribe("eru.node.n2.cmd.create")
    await agent.nc.subscribe("_INBOX.>")
    await agent.nc.subscribe("_INBOX_agent-n2.>")
    await settle(agent.nc)
    assert await agent.denied('"eru.node.n2.cmd.create"')
    assert await agent.denied('"_INBOX.>"')
    assert await agent.denied('"_INBOX_agent-n2.>"')
    js = agent.nc.jetstream(timeout=1)
    options = ConsumerOptions()
    # a consumer over another node's commands, under its own or the other's durable name: refused (no answer)
    with pytest.raises(Exception):  # noqa: B017, PT011 - the server drops the request: nats-py times out
        await ensure_consumer(js, NODE, node_agent_durable("n1"), "eru.node.n2.cmd.*", options)
    with pytest.raises(Exception):  # noqa: B017, PT011
        await ensure_consumer(js, NODE, node_agent_durable("n2"), "eru.node.n2.cmd.*", options)


async def test_node_agent_consumes_its_own_commands(connect_as: Connect) -> None:
    admin, agent = await connect_as("admin"), await connect_as("n1")
    admin_js = admin.nc.jetstream()
    await provision_streams(admin_js)
    js = agent.nc.jetstream(timeout=2)
    durable = node_agent_durable("n1")
    # first the consumer: ERU_NODE keeps a command only for the consumers interested in it (interest retention)
    await ensure_consumer(js, NODE, durable, "eru.node.n1.cmd.*", ConsumerOptions())
    await admin_js.publish("eru.node.n2.cmd.create", b"for n2")
    await admin_js.publish("eru.node.n1.cmd.create", b"for n1")
    subscription = await js.pull_subscribe_bind(durable=durable, stream=NODE)
    messages = await subscription.fetch(5, timeout=2)
    assert [m.data for m in messages] == [b"for n1"]
    await messages[0].ack()
    await asyncio.sleep(0.2)
    info = await admin_js.consumer_info(NODE, durable)
    assert info.num_ack_pending == 0
    assert agent.errors == []


async def test_client_cannot_command_node_agents(connect_as: Connect) -> None:
    admin, client = await connect_as("admin"), await connect_as("client")
    seen = await _collect(admin, "eru.>")
    await client.nc.publish("eru.node.n1.cmd.create", b"forged")
    await client.nc.publish("eru.metrics.n1", b"forged")
    await client.nc.publish("eru.t.a.deploy.request", b"fine")
    await settle(client.nc)
    assert await client.denied('"eru.node.n1.cmd.create"')
    assert await client.denied('"eru.metrics.n1"')
    await eventually(lambda: "eru.t.a.deploy.request" in seen)
    assert seen == ["eru.t.a.deploy.request"]


# The breaks of issue 13: the old `client` user could manage and pull from the deploy stream's consumers, run
# operator verbs and read every tenant's events. Each probe must now be refused by the server.
CLIENT_DENIED_PUBLISH = (
    "$JS.API.CONSUMER.DELETE.ERU_DEPLOY.allocator-deploy",
    "$JS.API.CONSUMER.MSG.NEXT.ERU_DEPLOY.allocator-deploy",
    "$JS.API.CONSUMER.CREATE.ERU_DEPLOY.mine.eru.deploy.request",
    "$JS.API.CONSUMER.DURABLE.CREATE.ERU_DEPLOY.mine",
    "$JS.API.STREAM.INFO.ERU_DEPLOY",
    "$JS.API.STREAM.PURGE.ERU_DEPLOY",
    "$JS.API.INFO",
    "$JS.ACK.ERU_DEPLOY.allocator-deploy.1.1.1.1.1",
    "eru.allocator.set-node",
    "eru.allocator.cordon",
    "eru.allocator.pod-create",
    "eru.allocator.tenant-set",
    "eru.allocator.tenant-create",
    "eru.allocator.remove",
    "eru.allocator.query",
    "eru.deploy.request",
    "eru.t.b.deploy.request",
    "eru.t.b.allocator.remove",
    "eru.t.a.allocator.set-node",
    "eru.allocator.stop",
    "eru.allocator.dissociate",
    "eru.allocator.remove-workload",
    "eru.t.b.allocator.stop",
    "eru.t.b.allocator.remove-workload",
    "eru.dlq.eru.deploy.request",
    "eru.t.a.deploy.x.completed",
)
CLIENT_DENIED_SUBSCRIBE = (
    "eru.deploy.*.*",
    "eru.>",
    "eru.t.b.deploy.>",
    "eru.t.*.deploy.>",
    "eru.container.>",
    "eru.dlq.>",
    "_INBOX.>",
    "_INBOX_operator.>",
    "$SRV.>",
)


async def test_client_probes_outside_its_tenant_are_all_denied(connect_as: Connect) -> None:
    admin, client = await connect_as("admin"), await connect_as("client")
    js = admin.nc.jetstream()
    await provision_streams(js)
    await ensure_consumer(js, DEPLOY, "allocator-deploy", "eru.deploy.request", ConsumerOptions())
    seen = await _collect(admin, ">")
    for subject in CLIENT_DENIED_PUBLISH:
        await client.nc.publish(subject, b"{}", reply="_INBOX_tenant-a.probe")
    for subject in CLIENT_DENIED_SUBSCRIBE:
        await client.nc.subscribe(subject)
    await settle(client.nc)
    for subject in (*CLIENT_DENIED_PUBLISH, *CLIENT_DENIED_SUBSCRIBE):
        assert await client.denied(f'"{subject}"'), subject
    await asyncio.sleep(0.2)
    assert not [s for s in seen if s in CLIENT_DENIED_PUBLISH]
    # the deploy consumer is still there, untouched
    info = await js.consumer_info(DEPLOY, "allocator-deploy")
    assert info.config.filter_subject == "eru.deploy.request"


async def test_client_may_ask_its_own_lifecycle_verbs(connect_as: Connect) -> None:
    admin, client = await connect_as("admin"), await connect_as("client")
    seen = await _collect(admin, "eru.t.a.allocator.>")
    verbs = ("stop", "start", "restart", "dissociate", "remove-workload")
    for verb in verbs:
        await client.nc.publish(f"eru.t.a.allocator.{verb}", b"{}", reply="_INBOX_tenant-a.probe")
    await settle(client.nc)
    await eventually(lambda: len(seen) == len(verbs))
    assert seen == [f"eru.t.a.allocator.{verb}" for verb in verbs]
    assert client.errors == []


async def test_client_reads_its_tenant_events_and_nothing_else(connect_as: Connect) -> None:
    admin, client, other = await connect_as("admin"), await connect_as("client"), await connect_as("client-b")
    mine = await _collect(client, "eru.t.a.deploy.>")
    containers = await _collect(client, "eru.t.a.container.>")
    theirs = await _collect(other, "eru.t.b.deploy.>")
    await admin.nc.publish("eru.t.a.deploy.d1.completed", b"a")
    await admin.nc.publish("eru.t.a.container.c1.running", b"a")
    await admin.nc.publish("eru.t.b.deploy.d2.completed", b"b")
    await settle(admin.nc)
    await eventually(lambda: bool(mine and containers and theirs))
    assert mine == ["eru.t.a.deploy.d1.completed"]
    assert containers == ["eru.t.a.container.c1.running"]
    assert theirs == ["eru.t.b.deploy.d2.completed"]
    assert client.errors == []


async def test_a_tenant_request_gets_its_stream_ack_through_its_inbox(connect_as: Connect) -> None:
    """A deploy request is a plain publish onto ERU_DEPLOY: the client needs no `$JS.API` for it, and the stream's
    acknowledgement reaches its own inbox."""
    admin, client = await connect_as("admin"), await connect_as("client")
    await provision_streams(admin.nc.jetstream())
    ack = await client.nc.request("eru.t.a.deploy.request", b"{}", timeout=5)
    assert b'"stream":"ERU_DEPLOY"' in ack.data.replace(b" ", b"")
    assert client.errors == []


async def test_operator_runs_verbs_and_redrives_but_reads_no_other_inbox(connect_as: Connect) -> None:
    admin, operator = await connect_as("admin"), await connect_as("operator")
    seen = await _collect(admin, "eru.>")
    await operator.nc.publish("eru.allocator.set-node", b"{}")
    await operator.nc.publish("eru.container.n1.started", b"a redriven dead letter")
    await operator.nc.subscribe("_INBOX_tenant-a.>")
    await operator.nc.subscribe("_INBOX.>")
    await settle(operator.nc)
    assert await operator.denied('"_INBOX_tenant-a.>"')
    assert await operator.denied('"_INBOX.>"')
    await eventually(lambda: len(seen) == 2)
    assert seen == ["eru.allocator.set-node", "eru.container.n1.started"]
    # JetStream management is an operator's (streams, consumers: `eru events`, dead letters)
    await provision_streams(operator.nc.jetstream())


def test_server_configuration_holds_bcrypt_hashes_only() -> None:
    config = render_server_config(list(ACCOUNTS.values()))
    for account in ACCOUNTS.values():
        assert account.password not in config
    assert config.count('"password": "$2a$') == len(ACCOUNTS)


def test_bad_accounts_are_named() -> None:
    with pytest.raises(InvalidInput, match="role"):
        make_account("root", "x", "y")
    with pytest.raises(InvalidInput, match="nodes"):
        make_account("node-agent", "agent", "y")
    with pytest.raises(InvalidInput, match="node"):
        make_account("node-agent", "agent", "y", nodes=["a.b"])
    with pytest.raises(InvalidInput, match="tenant"):
        make_account("client", "tenant-x", "y")
    with pytest.raises(InvalidInput, match="tenant"):
        client_account("a.b", "y")
    with pytest.raises(InvalidInput, match="twice"):
        render_server_config([ACCOUNTS["admin"], ACCOUNTS["admin"]])


async def test_dead_letters_are_the_operators_alone(connect_as: Connect) -> None:
    from eru.bus.dead_letter_admin import list_dead_letters
    from eru.bus.streams import DLQ

    admin, client = await connect_as("admin"), await connect_as("client")
    await provision_streams(admin.nc.jetstream())
    await admin.nc.jetstream().publish("eru.dlq.eru.deploy.request", b"x", headers={"Eru-Dlq-Reason": "test"})
    assert [letter.reason async for letter in list_dead_letters(admin.nc.jetstream())] == ["test"]
    with pytest.raises(Exception):  # noqa: B017, PT011 - the server refuses (a timeout or a permission error)
        await client.nc.jetstream().get_msg(DLQ, 1)
    await client.nc.publish("eru.dlq.eru.deploy.request", b"forged")
    await settle(client.nc)
    assert await client.denied('"eru.dlq.eru.deploy.request"')
    assert await client.denied(f'"$JS.API.STREAM.MSG.GET.{DLQ}"')


# What each central service may not do (docs/security.md "Roles"): the distributor only answers placements; the
# allocator and the eviction service publish anywhere but read only eru subjects and their own inbox, never a
# tenant's, the operator's or another service's replies.
SERVICE_DENIED = {
    "distributor": (
        ("publish", "eru.node.n1.cmd.create"),
        ("publish", "eru.deploy.request"),
        ("publish", "eru.allocator.cordon"),
        ("publish", "$JS.API.STREAM.PURGE.ERU_DEPLOY"),
        ("publish", "$JS.API.CONSUMER.DELETE.ERU_DEPLOY.allocator-deploy"),
        ("subscribe", "eru.>"),
        ("subscribe", "eru.deploy.request"),
        ("subscribe", "_INBOX.>"),
        ("subscribe", "_INBOX_operator.>"),
    ),
    "allocator": (
        ("subscribe", "_INBOX.>"),
        ("subscribe", "_INBOX_operator.>"),
        ("subscribe", "_INBOX_tenant-a.>"),
        ("subscribe", "_INBOX_eviction.>"),
        ("subscribe", "$JS.>"),
        ("subscribe", ">"),
    ),
    "eviction": (
        ("subscribe", "_INBOX.>"),
        ("subscribe", "_INBOX_allocator.>"),
        ("subscribe", "_INBOX_tenant-a.>"),
        ("subscribe", "$JS.>"),
        ("subscribe", ">"),
    ),
}


@pytest.mark.parametrize("role", sorted(SERVICE_DENIED))
async def test_each_service_role_is_denied_what_it_does_not_need(connect_as: Connect, role: str) -> None:
    admin, service = await connect_as("admin"), await connect_as(role)
    seen = await _collect(admin, ">")
    probes = SERVICE_DENIED[role]
    for kind, subject in probes:
        if kind == "publish":
            await service.nc.publish(subject, b"{}")
        else:
            await service.nc.subscribe(subject)
    await settle(service.nc)
    for kind, subject in probes:
        assert await service.denied(f'"{subject}"'), f"{role} {kind} {subject}"
    assert not [s for s in seen if (("publish", s) in probes)], "a denied publish reached a subscriber"


async def test_the_distributor_answers_placements_and_services_read_eru_subjects(connect_as: Connect) -> None:
    admin, distributor = await connect_as("admin"), await connect_as("distributor")

    async def answer(msg: Any) -> None:
        await msg.respond(b"placed")

    await distributor.nc.subscribe("eru.distributor.place", cb=answer)
    await settle(distributor.nc)
    reply = await admin.nc.request("eru.distributor.place", b"{}", timeout=5)
    assert reply.data == b"placed"
    for role in ("allocator", "eviction"):
        service = await connect_as(role)
        seen = await _collect(service, "eru.>")
        await admin.nc.publish("eru.node.n1.metrics", b"m")
        await settle(admin.nc)
        await eventually(lambda seen=seen: bool(seen))
        assert seen == ["eru.node.n1.metrics"], role
        assert not service.errors, service.errors


async def test_watermark_overrides_are_an_operators_verb(connect_as: Connect) -> None:
    """`eru node set --watermark` (docs/security.md): a tenant's credentials are refused by the server, an operator's
    request reaches the allocators."""
    admin, client, operator = await connect_as("admin"), await connect_as("client"), await connect_as("operator")
    seen = await _collect(admin, "eru.>")
    await client.nc.publish("eru.allocator.watermarks", b"forged")
    await client.nc.publish("eru.t.a.allocator.watermarks", b"forged")
    await client.nc.publish("eru.watermarks.node.n1", b"forged")
    await settle(client.nc)
    assert await client.denied('"eru.allocator.watermarks"')
    assert await client.denied('"eru.t.a.allocator.watermarks"')
    assert await client.denied('"eru.watermarks.node.n1"')
    await operator.nc.publish("eru.allocator.watermarks", b"{}")
    await settle(operator.nc)
    await eventually(lambda: "eru.allocator.watermarks" in seen)
    assert seen == ["eru.allocator.watermarks"]


async def test_logs_and_exec_streams_reach_only_their_tenant(connect_as: Connect) -> None:
    """docs/security.md "Logs and exec": only the allocator asks a node agent to stream, the agent of that node
    alone answers, and a tenant reads (and answers the pings of) its own stream subjects only."""
    allocator, agent, other_agent = await connect_as("allocator"), await connect_as("n1"), await connect_as("n2")
    client, other = await connect_as("client"), await connect_as("client-b")

    async def accept(msg: Any) -> None:
        await msg.respond(b"accepted")

    await agent.nc.subscribe("eru.node.n1.attach", cb=accept)
    await other_agent.nc.subscribe("eru.node.n1.attach")
    streamed: list[str] = []

    async def session(msg: Any) -> None:  # one subscription per session, as the CLI's (it answers the pings)
        streamed.append(msg.subject)
        if msg.reply:
            await client.nc.publish(msg.reply, b"")

    await client.nc.subscribe("eru.t.a.attach.>", cb=session)
    await other.nc.subscribe("eru.t.a.attach.>")
    await client.nc.publish("eru.node.n1.attach", b"{}")
    await client.nc.publish("eru.t.a.allocator.attach", b"{}")
    await settle(client.nc)
    await settle(agent.nc)
    assert await other_agent.denied('"eru.node.n1.attach"')
    assert await other.denied('"eru.t.a.attach.>"')
    assert await client.denied('"eru.node.n1.attach"')
    assert (await allocator.nc.request("eru.node.n1.attach", b"{}", timeout=5)).data == b"accepted"
    await agent.nc.publish("eru.t.a.attach.s1", b"chunk")
    await agent.nc.publish("eru.attach.s2", b"an operator's chunk")
    reply = await agent.nc.request("eru.t.a.attach.s1", b"ping", timeout=5)  # the client answers its pings
    assert reply.data == b""
    await eventually(lambda: streamed.count("eru.t.a.attach.s1") == 2)
    assert agent.errors == []
    assert [e for e in client.errors if "eru.t.a.allocator.attach" in e] == []
