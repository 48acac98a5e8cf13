"""The eviction service's CPU squeeze on a real Docker engine (docs/colocation.md "Suppression"): a bound container is
squeezed inside its own cpuset and never above its cores, a memory-prime one never above its own limit, a lift gives
each exactly its own allocation back; and a node's metrics sample survives containers removed while it is taken."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiodocker
import pytest
import pytest_asyncio
from agent_helpers import Collector, create, running_agent, send, workload

from eru.bus import new_id
from eru.domain.messages import ContainerEvent, NodeCommand
from eru.domain.resources import Allocation, ResourceRequest
from eru.nodeagent.engine import container_labels, engine_name, parse_cpuset
from eru_node_agent.runtime.docker import DockerRuntime

pytestmark = [pytest.mark.docker]
MiB = 1024**2


@pytest_asyncio.fixture
async def docker(docker_engine: str | None) -> AsyncIterator[aiodocker.Docker]:
    client = aiodocker.Docker(url=docker_engine)
    try:
        yield client
    finally:
        await client.close()


async def host_config(docker: aiodocker.Docker, container_id: str) -> dict[str, Any]:
    data: dict[str, Any] = await docker._query_json(f"containers/{engine_name(container_id)}/json")
    return dict(data["HostConfig"])


def suppress(node: str, container_id: str, quota: float | None) -> NodeCommand:
    return NodeCommand(
        command_id=new_id(),
        node=node,
        kind="suppress",
        container_id=container_id,
        cpu_quota=quota,
        reason="suppress: test" if quota is not None else "unsuppress: test",
    )


async def test_a_squeeze_stays_inside_the_cpuset_and_the_own_limit_and_a_lift_restores_exactly(
    js: Any, nc: Any, docker: aiodocker.Docker, busybox_image: str, docker_node: str
) -> None:
    node = docker_node
    events = await Collector(ContainerEvent).start(nc, f"eru.container.{node}.*")
    async with running_agent(js, DockerRuntime(), node) as agent:
        bound = create(
            node,
            workload(busybox_image, "sh", "-c", "yes > /dev/null", priority_class="batch"),
            Allocation(cpu_map={"1": 100}, memory=16 * MiB, cpu_bind=True),
        )
        limited = create(
            node,
            workload(
                busybox_image,
                "sh",
                "-c",
                "yes > /dev/null",
                priority_class="batch",
                resources=ResourceRequest(cpu_request=0.1, cpu_limit=0.1),
            ),
            Allocation(cpu_limit=0.1, memory=16 * MiB),
        )
        for command in (bound, limited):
            await send(js, command)
            started = await events.wait_for(lambda e, c=command: e.command_id == c.command_id)
            assert started.kind == "started", started.reason
        own = {cid: await host_config(docker, cid) for cid in (bound.container_id, limited.container_id)}
        assert parse_cpuset(own[bound.container_id]["CpusetCpus"]) == {"1"}

        async def apply(command: NodeCommand) -> dict[str, Any]:
            await send(js, command)
            done = await events.wait_for(lambda e: e.command_id == command.command_id)
            assert done.kind == "updated", done.reason
            return await host_config(docker, command.container_id)

        squeezed = await apply(suppress(node, bound.container_id, 0.3))
        assert parse_cpuset(squeezed["CpusetCpus"]) == {"1"}  # never widened to the node's other cores
        assert squeezed["CpuShares"] == own[bound.container_id]["CpuShares"]
        assert squeezed["CpuQuota"] == 30_000
        generous = await apply(suppress(node, bound.container_id, 5.0))
        assert parse_cpuset(generous["CpusetCpus"]) == {"1"}
        assert generous["CpuQuota"] == 100_000  # at most its one core
        capped = await apply(suppress(node, limited.container_id, 0.39))
        assert capped["CpuQuota"] == 10_000  # at most its own 0.1 core (the node had 39,422 µs here)
        assert agent.trail.suppressed == {bound.container_id, limited.container_id}

        def resources(host: dict[str, Any]) -> dict[str, Any]:  # the engine shows "no quota" as 0 or -1
            keys = ("CpusetCpus", "CpuShares", "CpuPeriod", "Memory")
            return {**{k: host[k] for k in keys}, "CpuQuota": max(0, host["CpuQuota"])}

        for cid in (bound.container_id, limited.container_id):
            lifted = await apply(suppress(node, cid, None))
            assert resources(lifted) == resources(own[cid])
        assert agent.trail.suppressed == set()


async def test_a_container_removed_while_the_node_is_sampled_is_left_out_of_that_sample(
    docker: aiodocker.Docker, busybox_image: str, docker_node: str
) -> None:
    """The issue: `node_agent.metrics_failed: AttributeError: 'NoneType' object has no attribute 'get'` when the
    engine's one-shot stats of a container being removed came back empty; the whole node's sample was lost."""
    runtime = DockerRuntime()
    cores = ["0"]
    ids: list[str] = []
    try:
        for index in range(6):
            command = create(
                docker_node, workload(busybox_image, "sleep", "600"), Allocation(memory=8 * MiB), f"churn{index}"
            )
            assert command.spec is not None
            await runtime.create(command.spec, container_labels(command.spec, docker_node), cores)
            await runtime.start(command.container_id)
            ids.append(command.container_id)
        first = await runtime.usage(ids, 1.0)  # counters to compare with
        assert first.memory_total > 0
        gone: list[str] = []
        for victim in list(ids[:-1]):
            # Sample every container while one of them is being removed (the engine may answer its stats empty).
            usage, _ = await asyncio.gather(runtime.usage(ids, 1.0), runtime.remove(victim))
            gone.append(victim)
            assert set(usage.containers) <= set(ids)
            assert ids[-1] in usage.containers  # the rest of the node's sample is there
            after = await runtime.usage(ids, 1.0)  # the removed container is simply absent now
            assert not set(after.containers) & set(gone)
    finally:
        for cid in ids:
            with contextlib.suppress(aiodocker.DockerError):
                await docker.containers.container(engine_name(cid)).delete(force=True)
        await runtime.close()
