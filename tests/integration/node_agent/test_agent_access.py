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
from eru.bus.access import make_account, render_server_config
from eru.domain.messages import ContainerEvent, Heartbeat, NodeMetrics, NodeRegistration
from eru.domain.resources import Allocation
from eru.testing.nats_server import NatsServer

ADMIN = make_account("admin", "admin", "admin-secret")
AGENT = make_account("node-agent", "agent-sec", "agent-secret", nodes=["sec-001", "sec-002"])


@pytest.fixture
def secured_server(tmp_path: Path) -> Iterator[NatsServer]:
    config = tmp_path / "nats.conf"
    config.write_text(render_server_config([ADMIN, AGENT]))
    server = NatsServer(store_dir=tmp_path / "nats", config_file=config)
    server.start()
    try:
        yield server
    finally:
        server.stop()


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
