"""A batch of containers on a real engine is reported container by container as the engine starts them: the first
container's `started` is on the bus before the engine has even created the last container of the batch."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import aiodocker
import pytest
from agent_helpers import Collector, create, running_agent, workload

from eru.bus import new_envelope, new_id, publish
from eru.bus.subjects import node_command
from eru.domain.messages import ContainerEvent, ContainerEvents, ContainerReport, NodeCommands
from eru.domain.resources import Allocation
from eru.nodeagent.engine import engine_name
from eru_node_agent.runtime.docker import DockerRuntime

pytestmark = [pytest.mark.docker]
MiB = 1024**2
CONTAINERS = 8
BOUND = 2  # the agent's engine_concurrency: well under the batch, so the engine creates it over several rounds


def engine_time(stamp: str) -> float:
    """The engine's RFC 3339 time with nanoseconds (`2026-01-02T03:04:05.123456789Z`) as epoch seconds."""
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{whole}.{(fraction or '0')[:6]:0<6}+00:00").timestamp()


def events_of(report: Any) -> list[ContainerEvent]:
    root = report.root
    return list(root.events) if isinstance(root, ContainerEvents) else [root]


async def test_the_first_container_of_a_batch_is_reported_before_the_engine_creates_the_last(
    js: Any, nc: Any, busybox_image: str, docker_node: str, docker_engine: str | None
) -> None:
    node = docker_node
    received: dict[str, float] = {}  # container id → when its result arrived (wall clock, as the engine's)
    reports = await Collector(ContainerReport).start(nc, f"eru.container.{node}.*")
    commands = [
        create(node, workload(busybox_image, "sleep", "600"), Allocation(memory=16 * MiB)) for _ in range(CONTAINERS)
    ]
    batch = NodeCommands(batch_id=new_id(), node=node, commands=commands)
    ours = {c.container_id for c in commands}
    counted = 0

    def all_reported() -> bool:
        nonlocal counted
        for _, report, _ in reports.items[counted:]:
            for event in events_of(report):
                if event.container_id not in ours:
                    assert event.kind == "foreign", event  # an engine may hold another node's containers
                    continue
                received.setdefault(event.container_id, time.time())
                assert event.kind == "started", event
        counted = len(reports.items)
        return len(received) == CONTAINERS

    async with running_agent(js, DockerRuntime(url=docker_engine), node, engine_concurrency=BOUND):
        await publish(js, node_command(node, "batch"), batch, new_envelope("eru.node.cmd.batch", "test"))
        await reports.wait_until(all_reported, timeout=120)
    reported = [e.container_id for _, report, _ in reports.items for e in events_of(report) if e.container_id in ours]
    assert sorted(reported) == sorted(c.container_id for c in commands)  # each container once

    docker = aiodocker.Docker(url=docker_engine)
    try:
        created = {}
        for command in commands:
            data = await docker._query_json(f"containers/{engine_name(command.container_id)}/json")
            created[command.container_id] = engine_time(data["Created"])
    finally:
        await docker.close()
    first_reported = min(received.values())
    last_created = max(created.values())
    assert first_reported < last_created, (
        f"the first result arrived {first_reported - last_created:.2f}s after the engine created the last container"
    )
