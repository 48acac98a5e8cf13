"""End to end with the real node agent on its simulated runtime: a prod load step pushes the node over the watermarks.

The sim runtime caps a container's CPU at its CFS quota, so the eviction service's suppression really bites; batch
is starved, the satisfaction rule evicts the lowest priorities, the agent removes them, and when prod's load falls
the suppression is lifted and the forbid condition clears. prod is never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from eviction_helpers import collect, start_replica

from eru.bus import decode, new_envelope, new_id, provision_streams, publish
from eru.bus.subjects import node_command
from eru.domain import ContainerEvent, ContainerSpec, NodeCommand, ResourceRequest, Workload
from eru.domain.resources import Allocation
from eru.nodeagent.load import LOAD_LABEL
from eru_node_agent.agent import NodeAgent
from eru_node_agent.config import AgentConfig
from eru_node_agent.runtime.sim import SimRuntime
from eru_node_agent.state import MemoryStateStore

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]

MIB = 1024**2
NODE = "sim-hot"
# 8 cores: forbid at 60 % (4.8), suppress = evict at 70 % (5.6); a 4 s window of 1 s samples.
WATERMARKS: dict[str, Any] = {
    "cpu_forbid": 60,
    "cpu_suppress": 70,
    "cpu_evict": 70,
    "window_seconds": 4,
    "suppress_dwell_seconds": 2,
}


@contextlib.asynccontextmanager
async def sim_agent(js: Any) -> AsyncIterator[SimRuntime]:
    await provision_streams(js)
    runtime = SimRuntime(NODE, cpu_cores=8, memory=64 * 1024 * MIB)
    config = AgentConfig(node=NODE, metrics_interval_seconds=1.0, heartbeat_interval_seconds=1.0, settle_seconds=0.1)
    agent = NodeAgent(config, runtime, js, MemoryStateStore())
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        await asyncio.wait_for(agent.started.wait(), 30)
        yield runtime
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await runtime.close()


async def deploy(js: Any, cid: str, klass: str, priority: int, cpu: float, load: dict[str, Any]) -> NodeCommand:
    workload = Workload(
        name=cid,
        image="sim",
        resources=ResourceRequest(cpu_request=cpu, memory_request=64 * MIB),
        priority_class=klass,  # type: ignore[arg-type]
        priority=priority,
        labels={LOAD_LABEL: json.dumps(load)},
    )
    spec = ContainerSpec(container_id=cid, deploy_id="d1", workload=workload, allocation=Allocation(memory=64 * MIB))
    command = NodeCommand(command_id=new_id(), node=NODE, kind="create", container_id=cid, spec=spec)
    await publish(js, node_command(NODE, "create"), command, new_envelope("eru.node.cmd.create", "test"))
    return command


def quotas(updated: list[ContainerEvent], commands: list[NodeCommand], cid: str) -> list[float | None]:
    """The CPU quotas the agent applied to `cid` (the suppress commands it reported `updated`), in order."""
    applied = {e.command_id for e in updated if e.container_id == cid}
    return [c.cpu_quota for c in commands if c.kind == "suppress" and c.command_id in applied]


async def test_sim_node_over_the_watermarks_is_suppressed_then_evicted_then_recovers(
    nats_url: str, nc: Any, js: Any
) -> None:
    found = await collect(nc)
    removed: list[ContainerEvent] = []
    updated: list[ContainerEvent] = []

    async def on_container(msg: Any) -> None:
        event = decode(msg.data, ContainerEvent)
        if event.kind == "removed":
            removed.append(event)
        if event.kind == "updated":
            updated.append(event)

    await nc.subscribe(f"eru.container.{NODE}.*", cb=on_container)
    replica = await start_replica(nats_url, "r1", nodes={NODE: WATERMARKS})
    try:
        async with sim_agent(js) as runtime:
            # prod: 2 cores, 4.5 from t=3 s, 1 from t=16 s. Three batch containers want 1 core each.
            prod_load = {"kind": "step", "steps": [{"at": 0, "cpu": 2}, {"at": 3, "cpu": 4.5}, {"at": 16, "cpu": 1}]}
            await deploy(js, "web", "prod", 0, 2, prod_load)
            for priority in range(3):
                await deploy(js, f"b{priority}", "batch", priority, 1, {"kind": "constant", "cpu": 1})
            started = time.monotonic()

            # Over 70 % → batch suppressed to 5.6 - 4.5 = 1.1 cores and starved (37 % satisfied): release
            # 3 - 1.1 / 0.8 = 1.625 cores → b0 and b1 go, b2 (the highest priority) stays.
            await found.wait_for(lambda f: any(e.kind == "evict" for e in f.events), within=30)
            event = next(e for e in found.events if e.kind == "evict")
            assert [v.container_id for v in event.victims] == ["b0", "b1"]
            assert event.reason == "cpu-satisfaction"
            suppress = next(e for e in found.events if e.kind == "suppress")
            assert suppress.batch_cpu_allowed == pytest.approx(1.1, abs=0.05)
            deadline = time.monotonic() + 10
            while {e.container_id for e in removed} != {"b0", "b1"}:
                assert time.monotonic() < deadline, f"the agent did not remove the victims: {removed}"
                await asyncio.sleep(0.1)
            assert set(runtime.containers) == {"web", "b2"}
            # The agent applied the quotas: b2 ran under its share of 1.1 cores, then under all of it. The second
            # quota follows the first sample after the victims left, so its `updated` event may still be on its way.
            while len(applied := quotas(updated, found.commands, "b2")) < 2:
                assert time.monotonic() < deadline + 10, f"b2's second quota was not applied: {applied}"
                await asyncio.sleep(0.1)
            assert applied[:2] == [pytest.approx(1.1 / 3, abs=1e-4), pytest.approx(1.1, abs=1e-4)]
            assert any(c.forbid_schedule_cpu for c in found.conditions)

            # prod falls back to 1 core at t=16 s: suppression lifted (b2 gets its own limit back), forbid clears.
            await found.wait_for(lambda f: any(e.kind == "unsuppress" for e in f.events), within=30)
            await found.wait_for(lambda f: f.conditions[-1].state == "normal", within=10)
            assert found.conditions[-1].forbid_schedule_cpu is False
            assert time.monotonic() - started >= 13  # it was the load step, not something earlier
            ours = [c for c, source in zip(found.commands, found.sources, strict=True) if source == "eviction/r1"]
            assert all(c.container_id != "web" for c in ours)  # prod is never suppressed nor evicted
            assert [c.container_id for c in ours if c.kind == "evict"] == ["b0", "b1"]
            assert {c.container_id for c in ours if c.kind == "suppress"} == {"b0", "b1", "b2"}
            assert quotas(updated, found.commands, "b2")[-1] is None  # lifted: its own allocation back
    finally:
        await replica.stop()
