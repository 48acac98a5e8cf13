"""The node-agent process under `eru up`'s access control: with only its confined node-agent account (its nodes'
commands, results, metrics, registrations, heartbeats) it starts, serves commands and publishes everything."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import Collector, create, send, workload

from eru.bus import connect, provision_streams
from eru.bus.access import Account, make_account
from eru.bus.node_groups import ensure_group_consumer
from eru.domain.messages import ContainerEvent, Heartbeat, NodeHeartbeats, NodeMetrics, NodeRegistration
from eru.domain.resources import Allocation
from eru.testing.nats_server import NatsServer
from eru.testing.secured_nats import secured_nats_server

ADMIN = make_account("admin", "admin", "admin-secret")
AGENT = make_account("node-agent", "agent-sec", "agent-secret", nodes=["sec-001", "sec-002"])
GROUPED = make_account("node-agent", "agent-grp", "grp-secret", nodes=["grp-001", "grp-002"], command_group="grp")


@pytest.fixture
def secured_server(tmp_path: Path) -> Iterator[NatsServer]:
    with secured_nats_server([ADMIN, AGENT, GROUPED], tmp_path) as server:
        yield server


async def test_the_agent_works_with_its_confined_account(secured_server: NatsServer, tmp_path: Path) -> None:
    admin = await connect(ADMIN.url(secured_server.url), name="admin")
    try:
        js: Any = admin.jetstream()
        await provision_streams(js)
        registrations = await Collector(NodeRegistration).start(admin, "eru.node.*.registered")
        heartbeats = await Collector(Heartbeat).start(admin, "eru.node.*.heartbeat")
        samples = await Collector(NodeMetrics).start(admin, "eru.metrics.*")
        events = await Collector(ContainerEvent).start(admin, "eru.container.*.*")
        env = {
            **os.environ,
            "ERU_BUS__URL": AGENT.url(secured_server.url),
            "ERU_BUS__INBOX_PREFIX": AGENT.inbox_prefix,
            "ERU_REPLICA": "agent-sec",
            "ERU_STATE_DIR": str(tmp_path / "state"),
            "ERU_NODE_AGENT__HEARTBEAT_INTERVAL_SECONDS": "1",
        }
        process = await asyncio.create_subprocess_exec(
            *[sys.executable, "-m", "eru_node_agent", "--nodes", "2", "--node", "sec", "--metrics-interval", "1"],
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            await registrations.wait_for(lambda _: len(registrations.items) == 2, timeout=30)
            command = create("sec-002", workload("sim"), Allocation(memory=1024**2))
            await send(js, command)
            started = await events.wait_for(lambda e: e.command_id == command.command_id, timeout=30)
            assert (started.kind, started.node) == ("started", "sec-002")
            await heartbeats.wait_for(lambda h: command.container_id in h.containers, timeout=30)
            await samples.wait_for(lambda s: s.node == "sec-002" and len(s.containers) == 1, timeout=30)
        finally:
            process.send_signal(signal.SIGTERM)
            output, _ = await asyncio.wait_for(process.communicate(), timeout=30)
        assert process.returncode == 0, output.decode()[-2000:]
        assert b"ermission" not in output, output.decode()[-2000:]  # no permissions violation anywhere
    finally:
        await admin.close()


def _agent(account: Account, server: NatsServer, tmp_path: Path, prefix: str, group: bool) -> Any:
    env = {
        **os.environ,
        "ERU_BUS__URL": account.url(server.url),
        "ERU_BUS__INBOX_PREFIX": account.inbox_prefix,
        "ERU_REPLICA": account.user,
        "ERU_STATE_DIR": str(tmp_path / "state"),
        **({"ERU_NODE_AGENT__COMMAND_GROUP": prefix} if group else {}),
        "ERU_NODE_AGENT__HEARTBEAT_INTERVAL_SECONDS": "1",
    }
    return asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "eru_node_agent", "--nodes", "2", "--node", prefix],
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )


async def test_a_grouped_agent_serves_its_nodes_through_the_provisioned_group(
    secured_server: NatsServer, tmp_path: Path
) -> None:
    admin = await connect(ADMIN.url(secured_server.url), name="admin")
    try:
        js: Any = admin.jetstream()
        await provision_streams(js)
        await ensure_group_consumer(js, "grp", ["grp-001", "grp-002"])  # what `eru up` provisions
        registrations = await Collector(NodeRegistration).start(admin, "eru.node.*.registered")
        events = await Collector(ContainerEvent).start(admin, "eru.container.*.*")
        beats = await Collector(NodeHeartbeats).start(admin, "eru.heartbeats.*")
        process = await _agent(GROUPED, secured_server, tmp_path, "grp", group=True)
        try:
            await registrations.wait_for(lambda _: len(registrations.items) == 2, timeout=30)
            # its nodes' heartbeats, one message for both, on the subject its account may publish on
            both = await beats.wait_for(lambda b: len(b.beats) == 2, timeout=30)
            assert sorted(beat.node for beat in both.beats) == ["grp-001", "grp-002"]
            command = create("grp-002", workload("sim"), Allocation(memory=1024**2))
            await send(js, command)
            started = await events.wait_for(lambda e: e.command_id == command.command_id, timeout=30)
            assert (started.kind, started.node) == ("started", "grp-002")
        finally:
            process.send_signal(signal.SIGTERM)
            output, _ = await asyncio.wait_for(process.communicate(), timeout=30)
        assert process.returncode == 0, output.decode()[-2000:]
        assert b"ermission" not in output, output.decode()[-2000:]
    finally:
        await admin.close()


async def test_a_grouped_agent_without_its_provisioned_group_says_so(
    secured_server: NatsServer, tmp_path: Path
) -> None:
    admin = await connect(ADMIN.url(secured_server.url), name="admin")
    try:
        await provision_streams(admin.jetstream())  # the streams, but not the group's consumer
        process = await _agent(GROUPED, secured_server, tmp_path, "grp", group=True)
        output, _ = await asyncio.wait_for(process.communicate(), timeout=60)
        assert process.returncode != 0
        assert b"node-group-grp of 2 nodes is missing or differs" in output, output.decode()[-2000:]
    finally:
        await admin.close()
