"""Containers' health checks reach the ledger (docs/node-agent.md "Health and node TTL"): the node agent reports
starting / healthy / unhealthy as `health` events, the allocator keeps the newest on the container's row. On the real
Docker engine (its own HEALTHCHECK) and on the sim runtime (the modelled rule)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiodocker
import pytest
from colocation_harness import sim_node
from pipeline_harness import GiB, Pipeline

from eru.bus.codec import decode
from eru.domain import ContainerEvent
from eru.domain.messages import QueryRequest
from eru.nodeagent.engine import engine_name
from eru.nodeagent.load import UNHEALTHY_LABEL
from eru.testing.pytest_docker import busybox_image, docker_engine, docker_node
from eru_node_agent.agent import NodeAgent
from eru_node_agent.config import AgentConfig
from eru_node_agent.runtime.docker import DockerRuntime
from eru_node_agent.state import MemoryStateStore

__all__ = ["busybox_image", "docker_engine", "docker_node"]

pytestmark = [pytest.mark.timeout(120)]
MiB = 1024**2
HEALTH = "SELECT id, health FROM containers WHERE workload = $1"


class HealthEvents:
    """Every `health` event published, in order."""

    def __init__(self) -> None:
        self.items: list[ContainerEvent] = []

    async def start(self, pipeline: Pipeline) -> HealthEvents:
        async def on_message(msg: Any) -> None:
            self.items.append(decode(msg.data, ContainerEvent))

        await pipeline.nc.subscribe("eru.container.*.health", cb=on_message)
        return self

    def of(self, container_id: str) -> list[str | None]:
        return [e.health for e in self.items if e.container_id == container_id]


async def _health(pipeline: Pipeline, workload: str) -> list[str | None]:
    return [row["health"] for row in await pipeline.pool.fetch(HEALTH, workload)]


@contextlib.asynccontextmanager
async def _docker_node(pipeline: Pipeline, node: str) -> AsyncIterator[NodeAgent]:
    config = AgentConfig(node=node, pod="p1", heartbeat_interval_seconds=0.5, stop_timeout_seconds=1.0)
    agent = NodeAgent(config, DockerRuntime(), pipeline.js, MemoryStateStore())
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        await asyncio.wait_for(agent.started.wait(), 30)
        yield agent
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await agent.runtime.close()


@pytest.mark.docker
async def test_on_docker_a_failing_health_command_turns_unhealthy_within_its_retries(
    nats_url: str, postgres_dsn: str, busybox_image: str, docker_node: str, docker_engine: str | None
) -> None:
    pipeline = Pipeline(nats_url, postgres_dsn)
    await pipeline.start()
    events = await HealthEvents().start(pipeline)
    try:
        async with _docker_node(pipeline, docker_node):
            await pipeline.wait_for(lambda: pipeline.pool.fetchval("SELECT count(*) FROM nodes"), 1)
            resources = {"cpu_request": 0.1, "memory_request": 16 * MiB}
            base = {"image": busybox_image, "command": ["sleep", "600"], "resources": resources}
            check = {"health_interval_seconds": 0.5, "health_retries": 2}
            sick = await pipeline.deploy(workload={**base, "name": "sick", "health_command": ["false"], **check})
            well = await pipeline.deploy(workload={**base, "name": "well", "health_command": ["true"], **check})
            assert (await pipeline.terminal(sick)).kind == "completed"
            assert (await pipeline.terminal(well)).kind == "completed"

            # the ledger keeps what the agent reported from the engine's own check
            await pipeline.wait_for(lambda: _health(pipeline, "sick"), ["unhealthy"])
            await pipeline.wait_for(lambda: _health(pipeline, "well"), ["healthy"])
            sick_id = await pipeline.pool.fetchval("SELECT id FROM containers WHERE workload = 'sick'")
            well_id = await pipeline.pool.fetchval("SELECT id FROM containers WHERE workload = 'well'")
            assert events.of(sick_id)[-1] == "unhealthy"
            assert "healthy" not in events.of(sick_id)
            assert events.of(well_id)[-1] == "healthy"
            assert "unhealthy" not in events.of(well_id)

            # the engine ran it: unhealthy after `health_retries` failures in a row, not before
            docker = aiodocker.Docker(url=docker_engine)
            try:
                inspected = await docker._query_json(f"containers/{engine_name(sick_id)}/json")
            finally:
                await docker.close()
            assert inspected["Config"]["Healthcheck"]["Test"] == ["CMD", "false"]
            assert inspected["Config"]["Healthcheck"]["Retries"] == 2
            assert inspected["State"]["Health"]["Status"] == "unhealthy"
            assert inspected["State"]["Health"]["FailingStreak"] >= 2

            # `container ls` (the query it reads) shows it
            reply = await pipeline.op("query", QueryRequest(what="containers", pod="p1"))
            assert {row["workload"]: row["health"] for row in reply.rows} == {"sick": "unhealthy", "well": "healthy"}
    finally:
        await pipeline.close()


async def test_on_sim_the_modelled_health_check_reaches_the_ledger(nats_url: str, postgres_dsn: str) -> None:
    pipeline = Pipeline(nats_url, postgres_dsn)
    await pipeline.start()
    events = await HealthEvents().start(pipeline)
    try:
        async with sim_node(pipeline, "sim-a"):
            await pipeline.wait_for(lambda: pipeline.pool.fetchval("SELECT count(*) FROM nodes"), 1)
            resources = {"cpu_request": 1, "memory_request": GiB}
            check = {"health_command": ["check"], "health_interval_seconds": 0.5, "health_retries": 3}
            base = {"image": "sim", "resources": resources, **check}
            sick = await pipeline.deploy(workload={**base, "name": "sick", "labels": {UNHEALTHY_LABEL: "true"}})
            well = await pipeline.deploy(workload={**base, "name": "well"})
            plain = await pipeline.deploy(workload={"image": "sim", "name": "plain", "resources": resources})
            for deploy_id in (sick, well, plain):
                assert (await pipeline.terminal(deploy_id)).kind == "completed"
            await pipeline.wait_for(lambda: _health(pipeline, "sick"), ["unhealthy"])
            await pipeline.wait_for(lambda: _health(pipeline, "well"), ["healthy"])
            assert await _health(pipeline, "plain") == [None]  # no health command: no health
            sick_id = await pipeline.pool.fetchval("SELECT id FROM containers WHERE workload = 'sick'")
            assert "healthy" not in events.of(sick_id)
            # `workload ls` (the query it reads): a failing check makes its workload unhealthy, not just "running"
            reply = await pipeline.op("query", QueryRequest(what="workloads", pod="p1"))
            shown = {row["name"]: (row["health"], row["unhealthy"]) for row in reply.rows}
            assert shown == {"sick": ("unhealthy", 1), "well": ("healthy", 0), "plain": ("healthy", 0)}
    finally:
        await pipeline.close()
