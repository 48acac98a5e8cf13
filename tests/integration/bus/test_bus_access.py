"""Subject permissions enforced by a real nats-server with the generated users (eru.bus.access)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
import pytest_asyncio

from eru.bus.access import Account, make_account, node_agent_durable, render_server_config
from eru.bus.connection import connect, settle
from eru.bus.consumer import ConsumerOptions, ensure_consumer
from eru.bus.errors import BusUnavailable
from eru.bus.streams import NODE, provision_streams
from eru.errors import InvalidInput
from eru.testing.nats_server import NatsServer

ACCOUNTS = {
    "admin": make_account("admin", "admin", "admin-secret"),
    "client": make_account("client", "client", "client-secret"),
    "n1": make_account("node-agent", "agent-n1", "n1-secret", nodes=["n1"]),
    "n2": make_account("node-agent", "agent-n2", "n2-secret", nodes=["n2"]),
}


class Connection:
    """A raw nats-py client of one account that records the permission errors the server sends it."""

    def __init__(self, client: Any, errors: list[str]) -> None:
        self.nc = client
        self.errors = errors

    async def violations(self, fragment: str) -> bool:
        for _ in range(50):
            if any("permissions violation" in e.lower() and fragment.lower() in e.lower() for e in self.errors):
                return True
            await asyncio.sleep(0.05)
        return False


@pytest.fixture
def secured_server(tmp_path: Path) -> Iterator[NatsServer]:
    config = tmp_path / "nats.conf"
    config.write_text(render_server_config(list(ACCOUNTS.values())))
    server = NatsServer(store_dir=tmp_path / "nats", config_file=config)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest_asyncio.fixture
async def connect_as(secured_server: NatsServer) -> AsyncIterator[Any]:
    opened: list[Any] = []

    async def connect(name: str) -> Connection:
        account: Account = ACCOUNTS[name]
        errors: list[str] = []

        async def on_error(error: Exception) -> None:
            errors.append(str(error))

        client = await nats.connect(
            account.url(secured_server.url),
            inbox_prefix=account.inbox_prefix,
            error_cb=on_error,
            allow_reconnect=False,
        )
        opened.append(client)
        return Connection(client, errors)

    yield connect
    for client in opened:
        await client.close()


async def _until(condition: Any, seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)


async def _collect(conn: Connection, subject: str) -> list[str]:
    seen: list[str] = []

    async def record(msg: Any) -> None:
        seen.append(msg.subject)

    await conn.nc.subscribe(subject, cb=record)
    await settle(conn.nc)
    return seen


async def test_wrong_password_is_refused(secured_server: NatsServer) -> None:
    bad = make_account("client", "client", "guess")
    with pytest.raises(Exception, match="Authorization"):
        await nats.connect(bad.url(secured_server.url), allow_reconnect=False, max_reconnect_attempts=0)


async def test_eru_connect_reports_refused_credentials_instead_of_retrying(secured_server: NatsServer) -> None:
    bad = make_account("client", "client", "guess")
    with pytest.raises(BusUnavailable, match=r"refused the connection: .*Authorization Violation"):
        await connect(bad.url(secured_server.url), name="wrong-password", connect_timeout=30)


async def test_node_agent_publishes_only_its_own_nodes_metrics(connect_as: Any) -> None:
    admin, agent = await connect_as("admin"), await connect_as("n1")
    seen = await _collect(admin, "eru.metrics.>")
    await agent.nc.publish("eru.metrics.n1", b"mine")
    await agent.nc.publish("eru.metrics.n2", b"forged")
    await agent.nc.publish("eru.container.n2.started", b"forged")
    await settle(agent.nc)
    assert await agent.violations('"eru.metrics.n2"')
    assert await agent.violations('"eru.container.n2.started"')
    await _until(lambda: "eru.metrics.n1" in seen)
    assert seen == ["eru.metrics.n1"]


async def test_node_agent_cannot_read_another_nodes_commands(connect_as: Any) -> None:
    admin, agent = await connect_as("admin"), await connect_as("n1")
    await provision_streams(admin.nc.jetstream())
    await agent.nc.subscribe("eru.node.n2.cmd.create")
    await agent.nc.subscribe("_INBOX.>")
    await agent.nc.subscribe("_INBOX_agent-n2.>")
    await settle(agent.nc)
    assert await agent.violations('"eru.node.n2.cmd.create"')
    assert await agent.violations('"_INBOX.>"')
    assert await agent.violations('"_INBOX_agent-n2.>"')
    js = agent.nc.jetstream(timeout=1)
    options = ConsumerOptions()
    # a consumer over another node's commands, under its own or the other's durable name: refused (no answer)
    with pytest.raises(Exception):  # noqa: B017, PT011 - the server drops the request: nats-py times out
        await ensure_consumer(js, NODE, node_agent_durable("n1"), "eru.node.n2.cmd.*", options)
    with pytest.raises(Exception):  # noqa: B017, PT011
        await ensure_consumer(js, NODE, node_agent_durable("n2"), "eru.node.n2.cmd.*", options)


async def test_node_agent_consumes_its_own_commands(connect_as: Any) -> None:
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


async def test_client_cannot_command_node_agents(connect_as: Any) -> None:
    admin, client = await connect_as("admin"), await connect_as("client")
    seen = await _collect(admin, "eru.>")
    await client.nc.publish("eru.node.n1.cmd.create", b"forged")
    await client.nc.publish("eru.metrics.n1", b"forged")
    await client.nc.publish("eru.deploy.request", b"fine")
    await settle(client.nc)
    assert await client.violations('"eru.node.n1.cmd.create"')
    assert await client.violations('"eru.metrics.n1"')
    await _until(lambda: "eru.deploy.request" in seen)
    assert seen == ["eru.deploy.request"]


def test_bad_accounts_are_named() -> None:
    with pytest.raises(InvalidInput, match="role"):
        make_account("root", "x", "y")
    with pytest.raises(InvalidInput, match="nodes"):
        make_account("node-agent", "agent", "y")
    with pytest.raises(InvalidInput, match="node"):
        make_account("node-agent", "agent", "y", nodes=["a.b"])
    with pytest.raises(InvalidInput, match="twice"):
        render_server_config([ACCOUNTS["admin"], ACCOUNTS["admin"]])


async def test_dead_letters_are_the_operators_alone(connect_as: Any) -> None:
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
    assert await client.violations('"eru.dlq.eru.deploy.request"')
    assert await client.violations(f'"$JS.API.STREAM.MSG.GET.{DLQ}"')
