"""A colocation node on the real Docker engine for tests and bench/bench_colocation_engine.py: a real node agent
(DockerRuntime) whose node is its own containers, an LS container whose busy loops are switched from inside, batch
containers, and what the engine and the bus say about them.

The node is *its containers*: the sample's node CPU and memory are the sums over the node's own containers, its
memory total a fixed figure. On the shared 2-core test machine the host's /proc/stat also counts every other
process (other tests, builds), which on a dedicated node would not exist; with it the node sits at ~100 % CPU
whatever the test does. Everything else is the engine's: per-container usage from its stats, quotas and cpusets
applied by the agent, inspected back with `docker inspect`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import aiodocker

from eru.bus import decode, new_envelope, new_id, provision_streams, publish
from eru.bus.subjects import node_command
from eru.domain import ContainerEvent, ContainerSpec, NodeCommand, NodeMetrics, ResourceRequest, Workload
from eru.domain.resources import Allocation
from eru.nodeagent.engine import engine_name
from eru_node_agent.agent import NodeAgent
from eru_node_agent.config import AgentConfig
from eru_node_agent.runtime.base import NodeUsage
from eru_node_agent.runtime.docker import DockerRuntime
from eru_node_agent.state import MemoryStateStore

MIB = 1024**2
# A busy loop that runs while the control file says "on" and idles (0.5 s naps) otherwise; `read` is a shell builtin,
# so a check costs no process. Each thread has its own control file /tmp/load<i>.
_THREAD = (
    "echo off > /tmp/load{i}; while :; do read s < /tmp/load{i}; "
    'if [ "$s" = on ]; then j=0; while [ $j -lt 300 ]; do j=$((j+1)); done; else sleep 0.5; fi; done'
)
# Fills the container's 64 MiB /dev/shm (tmpfs pages are charged to its memory cgroup), then stays.
HOG = "yes > /dev/shm/fill; sleep 3600"
BUSY = "while :; do :; done"


def ls_command(threads: int) -> list[str]:
    """The LS container's command: `threads` switchable busy loops."""
    loops = " & ".join(f"( {_THREAD.format(i=i)} )" for i in range(threads))
    return ["sh", "-c", f"{loops}; wait"]


class NodeOfItsContainers(DockerRuntime):
    """The agent's Docker runtime with the node's CPU and memory taken as the sums over its own containers."""

    def __init__(self, memory_total: int, url: str | None = None) -> None:
        super().__init__(url=url)
        self.memory_total = memory_total

    async def usage(self, container_ids: Sequence[str], interval_seconds: float) -> NodeUsage:
        """The engine's per-container usage; node totals = their sums (see the module docstring)."""
        usage = await super().usage(container_ids, interval_seconds)
        measured = usage.containers.values()
        return replace(
            usage,
            cpu_used=sum(c.cpu_used for c in measured),
            memory_used=sum(c.memory_used for c in measured),
            memory_total=self.memory_total,
        )


@dataclass
class Bus:
    """Samples, commands, eviction events and container events of one node, in arrival order."""

    samples: list[NodeMetrics] = field(default_factory=list)
    commands: list[NodeCommand] = field(default_factory=list)
    events: list[ContainerEvent] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def until(self, check: Callable[[], Any], within: float, what: str) -> Any:
        """Wait for `check()` to be truthy (asked at every new message); fails naming `what`."""
        deadline = time.monotonic() + within
        while not (result := check()):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"not within {within}s: {what}; {len(self.samples)} samples")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 0.5))
        return result


async def watch(nc: Any, node: str) -> Bus:
    """Subscribe (core) to the node's samples, commands and container events."""
    bus = Bus()

    def keeper(model: Any, into: list[Any]) -> Callable[[Any], Any]:
        async def on_message(msg: Any) -> None:
            into.append(decode(msg.data, model))
            bus.changed.set()

        return on_message

    await nc.subscribe(f"eru.metrics.{node}", cb=keeper(NodeMetrics, bus.samples))
    await nc.subscribe(f"eru.node.{node}.cmd.*", cb=keeper(NodeCommand, bus.commands))
    await nc.subscribe(f"eru.container.{node}.*", cb=keeper(ContainerEvent, bus.events))
    await nc.flush()
    return bus


def decision_time(command: NodeCommand) -> float:
    """When the eviction service decided a command (`command_id` = `<node>-<ms>-<kind>-<id>`, the replica's clock)."""
    return int(command.command_id[len(command.node) + 1 :].split("-", 1)[0]) / 1000


@contextlib.asynccontextmanager
async def engine_agent(js: Any, node: str, interval: float, memory_total: int) -> AsyncIterator[NodeAgent]:
    """A real node agent on the Docker engine serving `node` (metrics every `interval` seconds)."""
    await provision_streams(js)
    runtime = NodeOfItsContainers(memory_total)
    config = AgentConfig(
        node=node,
        metrics_interval_seconds=interval,
        heartbeat_interval_seconds=1.0,
        settle_seconds=0.2,
        stop_timeout_seconds=1.0,
    )
    agent = NodeAgent(config, runtime, js, MemoryStateStore())
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        started = asyncio.create_task(agent.started.wait())
        await asyncio.wait({task, started}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()
        assert agent.started.is_set(), "agent did not start within 60s"
        yield agent
    finally:
        stop.set()
        try:
            await asyncio.wait_for(task, 60)
        finally:
            await runtime.close()


async def create(
    js: Any,
    bus: Bus,
    node: str,
    image: str,
    command: list[str],
    *,
    priority_class: str,
    cpu_request: float,
    allocation: Allocation,
    name: str,
) -> str:
    """Create and start a container on the node through the agent; its eru id once started."""
    cid = f"{name}{new_id().replace('-', '')[-10:]}"
    workload = Workload(
        name=name,
        image=image,
        command=command,
        resources=ResourceRequest(
            cpu_request=cpu_request, cpu_limit=allocation.cpu_limit, memory_request=allocation.memory
        ),
        priority_class=priority_class,
    )
    spec = ContainerSpec(container_id=cid, deploy_id=f"d-{name}", workload=workload, allocation=allocation)
    order = NodeCommand(command_id=new_id(), node=node, kind="create", container_id=cid, spec=spec)
    await publish(js, node_command(node, "create"), order, new_envelope("eru.node.cmd.create", "test"))
    done = await bus.until(
        lambda: next((e for e in bus.events if e.command_id == order.command_id), None),
        120,
        f"{name} started",
    )
    assert done.kind == "started", done.reason
    return cid


async def host_config(docker: aiodocker.Docker, cid: str) -> dict[str, Any]:
    """The container's HostConfig as the engine reports it."""
    data: dict[str, Any] = await docker._query_json(f"containers/{engine_name(cid)}/json")
    return dict(data["HostConfig"])


async def exec_in(docker: aiodocker.Docker, cid: str, script: str) -> None:
    """Run `sh -c script` in the container and wait for it to finish."""
    container = await docker.containers.get(engine_name(cid))
    execution = await container.exec(["sh", "-c", script], stdout=True, stderr=True)
    async with execution.start(detach=False) as stream:
        while await stream.read_out() is not None:
            pass


async def switch(docker: aiodocker.Docker, cid: str, threads: Sequence[int], on: bool) -> None:
    """Switch the LS container's busy loops `threads` on or off (from inside the container)."""
    word = "on" if on else "off"
    await exec_in(docker, cid, "; ".join(f"echo {word} > /tmp/load{i}" for i in threads))
