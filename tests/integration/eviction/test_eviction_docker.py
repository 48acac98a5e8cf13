"""With the Docker runtime: a suppressed batch container's CFS quota really changes on the engine."""

from __future__ import annotations

import asyncio
from typing import Any

import aiodocker
import pytest
from eviction_helpers import collect, start_replica

from eru.bus import decode, new_envelope, new_id, provision_streams, publish
from eru.bus.subjects import node_command
from eru.domain import ContainerEvent, ContainerSpec, NodeCommand, ResourceRequest, Workload
from eru.domain.resources import Allocation
from eru.nodeagent.engine import engine_name
from eru_node_agent.agent import NodeAgent
from eru_node_agent.config import AgentConfig
from eru_node_agent.runtime.docker import DockerRuntime
from eru_node_agent.state import MemoryStateStore

pytestmark = [pytest.mark.docker, pytest.mark.timeout(120)]
MIB = 1024**2

# Suppress at 0 %: whatever the shared machine's real load, batch may use nothing beyond the 0.01-core floor. CPU
# eviction needs a third of a 600 s window, so nothing is evicted during the test; memory never reaches 100 %.
WATERMARKS: dict[str, Any] = {
    "cpu_forbid": 0,
    "cpu_suppress": 0,
    "cpu_evict": 0,
    "memory_forbid": 100,
    "memory_evict": 100,
    "window_seconds": 600,
    "metrics_interval_seconds": 3,
}


async def read_quota(docker: aiodocker.Docker, container_id: str) -> tuple[int, int]:
    """(quota, period) in µs as the container's own cgroup says (v1 or v2), read through docker exec."""
    container = await docker.containers.get(engine_name(container_id))

    async def cat(path: str) -> str:
        execution = await container.exec(["cat", path], stdout=True, stderr=True)
        output = b""
        async with execution.start(detach=False) as stream:
            while (message := await stream.read_out()) is not None:
                output += message.data
        return output.decode().strip()

    v1 = await cat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
    if v1 and "No such file" not in v1:
        return int(v1), int(await cat("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))
    quota, period = (await cat("/sys/fs/cgroup/cpu.max")).split()
    return (-1 if quota == "max" else int(quota)), int(period)


async def test_suppression_sets_the_cfs_quota_on_the_engine(
    nats_url: str, nc: Any, js: Any, busybox_image: str, docker_node: str, docker_engine: str | None
) -> None:
    node = docker_node
    found = await collect(nc)
    updated: list[ContainerEvent] = []

    async def on_container(msg: Any) -> None:
        event = decode(msg.data, ContainerEvent)
        if event.kind in ("updated", "started", "failed"):
            updated.append(event)

    await nc.subscribe(f"eru.container.{node}.*", cb=on_container)
    await provision_streams(js)
    replica = await start_replica(nats_url, "r1", nodes={node: WATERMARKS})
    runtime = DockerRuntime(url=docker_engine)
    config = AgentConfig(node=node, metrics_interval_seconds=1.0, heartbeat_interval_seconds=1.0, settle_seconds=0.2)
    agent = NodeAgent(config, runtime, js, MemoryStateStore())
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    docker = aiodocker.Docker(url=docker_engine)
    try:
        await asyncio.wait_for(agent.started.wait(), 30)
        cid = f"b{new_id().replace('-', '')[-12:]}"
        workload = Workload(
            name="batch",
            image=busybox_image,
            command=["sleep", "600"],
            resources=ResourceRequest(cpu_request=1, memory_request=16 * MIB),
            priority_class="batch",
        )
        spec = ContainerSpec(
            container_id=cid, deploy_id="d1", workload=workload, allocation=Allocation(memory=16 * MIB)
        )
        create = NodeCommand(command_id=new_id(), node=node, kind="create", container_id=cid, spec=spec)
        await publish(js, node_command(node, "create"), create, new_envelope("eru.node.cmd.create", "test"))
        await found.wait_for(
            lambda f: any(c.kind == "suppress" and c.container_id == cid for f_ in [f] for c in f_.commands), within=60
        )
        for _ in range(100):
            if any(e.kind == "updated" and e.container_id == cid for e in updated):
                break
            await asyncio.sleep(0.2)
        suppress = next(c for c in found.commands if c.kind == "suppress" and c.container_id == cid)
        assert suppress.cpu_quota == pytest.approx(0.01)  # the floor: 1 ms per 100 ms period
        assert any(e.kind == "updated" and e.container_id == cid for e in updated), updated
        inspected = await docker._query_json(f"containers/{engine_name(cid)}/json")
        assert inspected["HostConfig"]["CpuQuota"] == 1000
        assert await read_quota(docker, cid) == (1000, 100000)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await runtime.close()
        await docker.close()
        await replica.stop()
