"""A real node agent on the sim runtime and a real eviction replica beside a test pipeline: what the batch and
colocation chain tests run (test_kept_batch_chain, test_batch_reclaimed_chain)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

from pipeline_harness import GiB, Pipeline

from eru.bus.connection import connect
from eru.service import ServiceContext
from eru.settings import Settings
from eru_eviction.app import service_main
from eru_node_agent.agent import NodeAgent
from eru_node_agent.config import AgentConfig
from eru_node_agent.runtime.sim import SimRuntime
from eru_node_agent.state import MemoryStateStore


@contextlib.asynccontextmanager
async def sim_node(pipeline: Pipeline, name: str) -> AsyncIterator[None]:
    """Node `name` in pod p1 (8 cores, 16 GiB) served by a node agent, 1 s metrics and heartbeats."""
    runtime = SimRuntime(name, cpu_cores=8, memory=16 * GiB)
    config = AgentConfig(node=name, pod="p1", metrics_interval_seconds=1.0, heartbeat_interval_seconds=1.0)
    agent = NodeAgent(config, runtime, pipeline.js, MemoryStateStore())
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        await asyncio.wait_for(agent.started.wait(), 30)
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await runtime.close()


@contextlib.asynccontextmanager
async def eviction_replica(nats_url: str, watermarks: Mapping[str, Any]) -> AsyncIterator[None]:
    """One eviction service replica with these watermark settings, ready before the body runs."""
    nc = await connect(nats_url, name="eviction-r1")
    settings = Settings(replica="r1", bus={"url": nats_url}, eviction={"watermarks": dict(watermarks)})
    ctx = ServiceContext(name="eviction", settings=settings, nc=nc, js=nc.jetstream(), pool=None)
    task = asyncio.create_task(service_main(ctx))
    try:
        await asyncio.wait_for(ctx.ready.wait(), 10)
        yield
    finally:
        ctx.stopping.set()
        await asyncio.wait_for(task, 10)
        await nc.close()
