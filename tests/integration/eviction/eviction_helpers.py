"""Running eviction replicas in the test's event loop, publishing NodeMetrics, collecting what the service sends."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from eru.bus import decode, new_envelope, publish
from eru.bus.connection import connect, settle
from eru.domain import ContainerMetrics, EvictionDecision, NodeCommand, NodeCondition, NodeMetrics
from eru.service import ServiceContext
from eru.settings import Settings
from eru_eviction.app import service_main

GIB = 1024**3

# Short windows so a test runs in seconds: 10 s window of 1 s samples (4 samples cover it), 2 s CPU cool-down.
WATERMARKS: dict[str, Any] = {
    "window_seconds": 10,
    "metrics_interval_seconds": 1,
    "cpu_cooldown_seconds": 2,
    "memory_cooldown_seconds": 1,
}


@dataclass
class Replica:
    """One eviction replica running in this event loop with its own NATS connection."""

    ctx: ServiceContext
    task: asyncio.Task[None]

    async def stop(self) -> None:
        """A clean stop: leases are given back."""
        self.ctx.stopping.set()
        await asyncio.wait_for(self.task, 10)
        await self.ctx.nc.close()

    async def crash(self) -> None:
        """Die without giving anything back: the connection goes first, so no lease can be released on the way out."""
        await self.ctx.nc.close()
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.task


async def start_replica(url: str, name: str, **eviction: Any) -> Replica:
    """Start `service_main` as replica `name`; returns once it is ready."""
    nc = await connect(url, name=f"eviction-{name}")
    settings = Settings(replica=name, bus={"url": url}, eviction={"watermarks": dict(WATERMARKS), **eviction})
    ctx = ServiceContext(name="eviction", settings=settings, nc=nc, js=nc.jetstream(), pool=None)
    task = asyncio.create_task(service_main(ctx))
    ready = asyncio.create_task(ctx.ready.wait())
    await asyncio.wait({task, ready}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        try:
            task.result()
        finally:
            await nc.close()
    assert ctx.ready.is_set(), "replica did not become ready"
    return Replica(ctx, task)


def metrics(
    node: str,
    at: float,
    *,
    node_cpu: float,
    batch: dict[str, float],
    node_memory: int = 20 * GIB,
    batch_memory: int = 1 * GIB,
    allowed: float | None = None,
) -> NodeMetrics:
    """A 32-core, 64 GiB node: prod `p1` (8 cores requested, using 10), batch containers b<i> of 4 cores each."""
    containers = [
        ContainerMetrics(
            container_id="p1",
            priority_class="prod",
            priority=0,
            tenant="t",
            cpu_used=10.0,
            memory_used=8 * GIB,
            cpu_request=8,
            memory_request=8 * GIB,
        )
    ]
    for index, (cid, used) in enumerate(sorted(batch.items())):
        containers.append(
            ContainerMetrics(
                container_id=cid,
                priority_class="batch",
                priority=index,
                tenant="t",
                cpu_used=used,
                memory_used=batch_memory,
                cpu_request=4,
                memory_request=2 * GIB,
            )
        )
    return NodeMetrics(
        node=node,
        time=at,
        cpu_capacity=32,
        cpu_used=node_cpu,
        memory_used=node_memory,
        memory_total=64 * GIB,
        batch_cpu_allowed=allowed,
        containers=containers,
    )


async def send(js: Any, sample: NodeMetrics) -> None:
    """Publish a sample as a node agent does."""
    await publish(js, f"eru.metrics.{sample.node}", sample, new_envelope("eru.metrics", f"node-agent/{sample.node}"))


@dataclass
class Collected:
    """Everything the service published for some nodes, decoded."""

    commands: list[NodeCommand] = field(default_factory=list)
    events: list[EvictionDecision] = field(default_factory=list)
    conditions: list[NodeCondition] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    async def wait_for(self, check: Callable[[Collected], bool], within: float = 10.0) -> None:
        deadline = time.monotonic() + within
        while not check(self):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; have {len(self.commands)} commands, {len(self.events)} events")
            await asyncio.sleep(0.05)


async def collect(nc: Any) -> Collected:
    """Subscribe (core) to node commands, eviction events and node conditions."""
    found = Collected()

    async def on_command(msg: Any) -> None:
        found.commands.append(decode(msg.data, NodeCommand))
        found.sources.append(msg.headers.get("ce-source", ""))

    async def on_event(msg: Any) -> None:
        found.events.append(decode(msg.data, EvictionDecision))

    async def on_condition(msg: Any) -> None:
        found.conditions.append(decode(msg.data, NodeCondition))

    await nc.subscribe("eru.node.*.cmd.*", cb=on_command)
    await nc.subscribe("eru.eviction.*", cb=on_event)
    await nc.subscribe("eru.node.*.condition", cb=on_condition)
    await settle(nc)
    return found
