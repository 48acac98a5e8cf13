"""The node agent on the simulated runtime, over a real nats-server: commands, replace and rollback, metrics that
follow the load model, many nodes in one process, and the `eru-node-agent --sim --nodes N` command."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from typing import Any

from agent_helpers import Collector, create, running_agent, send, workload

from eru.bus import new_id
from eru.bus.discovery import discover_services
from eru.bus.envelope import H_CAUSATION, H_ID
from eru.domain.messages import ContainerEvent, ContainerSpec, NodeCommand, NodeMetrics, NodeRegistration
from eru.domain.resources import Allocation, ResourceRequest
from eru.nodeagent.load import EXIT_AFTER_LABEL, LOAD_LABEL
from eru.settings import load_settings
from eru_node_agent.app import build_agents, run_agents
from eru_node_agent.runtime.sim import SimRuntime
from eru_node_agent.state import MemoryStateStore

MiB = 1024**2


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


async def test_sim_agent_runs_the_command_set_and_reports_the_load_model(js: Any, nc: Any) -> None:
    node = "sim-a"
    clock = Clock()
    runtime = SimRuntime(node, cpu_cores=8, clock=clock)
    events = await Collector(ContainerEvent).start(nc, f"eru.container.{node}.*")
    load = {"kind": "step", "steps": [{"at": 0, "cpu": 0.25, "memory": "100MiB"}, {"at": 60, "cpu": 4}]}
    request = ResourceRequest(cpu_request=1, cpu_limit=2, memory_request=256 * MiB)
    async with running_agent(js, runtime, node, metrics_interval_seconds=3600, settle_seconds=0.2) as agent:
        web = create(
            node,
            workload(
                "sim", resources=request, tenant="t9", priority_class="batch", labels={LOAD_LABEL: json.dumps(load)}
            ),
            Allocation(cpu_limit=2, memory=256 * MiB),
        )
        await send(js, web)
        assert (await events.wait_for(lambda e: e.command_id == web.command_id)).kind == "started"

        sample = NodeMetrics.model_validate(await agent.metrics_once(1.0))
        (container,) = sample.containers
        assert (container.cpu_used, container.memory_used) == (0.25, 100 * MiB)
        assert (container.priority_class, container.tenant, container.cpu_limit) == ("batch", "t9", 2.0)
        clock.now += 60
        sample = NodeMetrics.model_validate(await agent.metrics_once(1.0))
        assert sample.containers[0].cpu_used == 2.0  # demand 4, quota 2 cores
        assert sample.containers[0].throttled_periods == 10

        commands = [
            NodeCommand(
                command_id=new_id(),
                node=node,
                kind="update",
                container_id=web.container_id,
                allocation=Allocation(cpu_limit=3, memory=256 * MiB),
            ),
            NodeCommand(command_id=new_id(), node=node, kind="pause", container_id=web.container_id),
            NodeCommand(command_id=new_id(), node=node, kind="unpause", container_id=web.container_id),
        ]
        for command in commands:
            await send(js, command)
        kinds = [(await events.wait_for(lambda e, c=c: e.command_id == c.command_id)).kind for c in commands]
        assert kinds == ["updated", "paused", "unpaused"]
        assert NodeMetrics.model_validate(await agent.metrics_once(1.0)).containers[0].cpu_used == 3.0

        crash = ContainerSpec(
            container_id="crashes",
            deploy_id="d2",
            workload=workload("sim", labels={EXIT_AFTER_LABEL: "0"}),
            allocation=Allocation(),
        )
        rollback = NodeCommand(
            command_id=new_id(), node=node, kind="replace", container_id=web.container_id, replacement=crash
        )
        await send(js, rollback)
        failed = await events.wait_for(lambda e: e.command_id == rollback.command_id)
        assert (failed.kind, failed.container_id) == ("failed", "crashes")
        assert (await runtime.inspect(web.container_id)).state == "running"  # type: ignore[union-attr]

        good = ContainerSpec(container_id="next", deploy_id="d3", workload=workload("sim"), allocation=Allocation())
        replace = NodeCommand(
            command_id=new_id(), node=node, kind="replace", container_id=web.container_id, replacement=good
        )
        await send(js, replace)
        replaced = await events.wait_for(lambda e: e.command_id == replace.command_id)
        assert (replaced.kind, replaced.container_id, replaced.replaced_container_id) == (
            "replaced",
            "next",
            web.container_id,
        )
        assert replaced.allocation == Allocation(cpu_limit=3, memory=256 * MiB)  # the old one's allocation
        assert set(runtime.containers) == {"next"}

        evict = NodeCommand(command_id=new_id(), node=node, kind="evict", container_id="next", reason="memory")
        await send(js, evict)
        removed = await events.wait_for(lambda e: e.command_id == evict.command_id)
        assert (removed.kind, removed.reason) == ("removed", "memory")
        assert runtime.containers == {}
        # each command was a debug line; the periodic info summary counts them by kind and result, then restarts
        assert agent.summary_once() == {
            "create:started": 1,
            "evict:removed": 1,
            "pause:paused": 1,
            "replace:failed": 1,
            "replace:replaced": 1,
            "unpause:unpaused": 1,
            "update:updated": 1,
        }
        assert agent.summary_once() == {}


async def test_a_restarted_sim_agent_rebuilds_from_its_runtime(js: Any, nc: Any) -> None:
    node = "sim-b"
    runtime = SimRuntime(node)
    store = MemoryStateStore()
    events = await Collector(ContainerEvent).start(nc, f"eru.container.{node}.*")
    first = create(node, workload("sim"), Allocation(memory=MiB), container_id="first")
    second = create(node, workload("sim"), Allocation(memory=MiB), container_id="second")
    async with running_agent(js, runtime, node, store=store):
        for command in (first, second):
            await send(js, command)
            await events.wait_for(lambda e, c=command: e.command_id == c.command_id)
    await runtime.remove("second")  # gone while the agent was down
    events.items.clear()
    async with running_agent(js, runtime, node, store=store) as agent:
        assert (await events.wait_for(lambda e: e.container_id == "first")).kind == "found"
        vanished = await events.wait_for(lambda e: e.container_id == "second")
        assert vanished.kind == "removed"
        assert set(agent.state.containers) == {"first"}
        # The create of `first` again under its old command id (an outbox repeat after the restart): no effect,
        # the remembered result is repeated.
        await runtime.stop("first", 0)
        await send(js, first)
        repeated = await events.wait_for(lambda e: e.command_id == first.command_id)
        assert repeated.kind == "started"
        assert runtime.containers["first"].state == "exited"  # not started again


async def test_two_hundred_sim_nodes_in_one_process_register_and_publish_metrics(js: Any, nc: Any) -> None:
    count = 200
    settings = load_settings(
        node_agent={"runtime": "sim", "sim_nodes": count, "node": "scale", "metrics_interval_seconds": 1.0}
    )
    registrations = await Collector(NodeRegistration).start(nc, "eru.node.*.registered")
    samples = await Collector(NodeMetrics).start(nc, "eru.metrics.*")
    from eru.bus import provision_streams

    await provision_streams(js)
    agents = build_agents(settings, js)
    assert len({agent.node for agent in agents}) == count
    stop = asyncio.Event()
    began = time.monotonic()
    # started as the sim process starts them (bounded, retried starts; one report timer), counted once per batch of
    # samples: see docs/node-agent.md "Many simulated nodes in one process" for why both matter under load
    tasks = run_agents(agents, stop, shared=True)
    try:
        await samples.wait_until(lambda: len({s.node for s in samples.models()}) == count, timeout=60)
        nodes_with_metrics = {s.node for s in samples.models()}
        assert len(nodes_with_metrics) == count, f"{len(nodes_with_metrics)} of {count} nodes published metrics"
        assert {r.node for r in registrations.models()} == {agent.node for agent in agents}
        assert all(r.runtime == "sim" and len(r.cpu_map) == 16 for r in registrations.models())
        print(f"\n{count} sim nodes: all registered and sampled after {time.monotonic() - began:.1f}s")
        # A command to one of them is served by that node's own consumer.
        target = agents[137].node
        events = await Collector(ContainerEvent).start(nc, f"eru.container.{target}.*")
        command = create(target, workload("sim"), Allocation(memory=MiB))
        await send(js, command)
        assert (await events.wait_for(lambda e: e.command_id == command.command_id)).kind == "started"
        assert [a.node for a in agents if a.state.containers] == [target]
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)


async def test_the_command_line_serves_several_sim_nodes(nats_url: str, nc: Any) -> None:
    registrations = await Collector(NodeRegistration).start(nc, "eru.node.*.registered")
    samples = await Collector(NodeMetrics).start(nc, "eru.metrics.*")
    env = {**os.environ, "ERU_BUS__URL": nats_url, "ERU_LOG_FORMAT": "json", "ERU_REPLICA": "cli-test"}
    process = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "eru_node_agent", "--sim", "--nodes", "3", "--node", "cli", "--metrics-interval", "1"],
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await samples.wait_for(lambda s: len({x.node for x in samples.models()}) == 3, timeout=30)
        assert {r.node for r in registrations.models()} == {"cli-001", "cli-002", "cli-003"}
        for _ in range(15):  # `eru status` sees the replica, ready, serving three nodes
            found = [s for s in await discover_services(nc) if s["service"] == "node-agent"]
            if found and found[0]["ready"] and "nodes=3" in found[0]["load"]:
                break
            await asyncio.sleep(0.2)
        assert found, "the agent did not answer $SRV.STATS"
        assert found[0]["ready"]
        assert "nodes=3" in found[0]["load"], found
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode == 0, stderr.decode()


class CountingSim(SimRuntime):
    """A simulated node whose creates take a while, counting how many run at once (overall and per container)."""

    def __init__(self, node: str) -> None:
        super().__init__(node)
        self.running = 0
        self.most = 0
        self.per_container: dict[str, int] = {}
        self.most_per_container = 0

    async def create(self, spec: ContainerSpec, labels: Any, node_cores: Any) -> str:
        self.running += 1
        self.per_container[spec.container_id] = self.per_container.get(spec.container_id, 0) + 1
        self.most = max(self.most, self.running)
        self.most_per_container = max(self.most_per_container, self.per_container[spec.container_id])
        try:
            await asyncio.sleep(0.2)
            return await super().create(spec, labels, node_cores)
        finally:
            self.running -= 1
            self.per_container[spec.container_id] -= 1


async def test_commands_run_with_bounded_concurrency_and_one_at_a_time_per_container(js: Any, nc: Any) -> None:
    node = "sim-c"
    runtime = CountingSim(node)
    events = await Collector(ContainerEvent).start(nc, f"eru.container.{node}.*")
    async with running_agent(js, runtime, node, max_concurrent_commands=3):
        commands = [create(node, workload("sim"), Allocation(memory=MiB)) for _ in range(9)]
        # Two different commands for one container (a create and its retry under another command id).
        twin = create(node, workload("sim"), Allocation(memory=MiB), container_id="twin")
        twin_again = twin.model_copy(update={"command_id": new_id()})
        # The twins go first, so both are fetched in the first batch and would overlap without the per-container lock.
        for command in [twin, twin_again, *commands]:
            await send(js, command)
        for command in [twin, twin_again, *commands]:
            result = await events.wait_for(lambda e, c=command: e.command_id == c.command_id)
            assert result.kind == "started"
    assert runtime.most == 3
    assert runtime.most_per_container == 1
    assert len(runtime.containers) == 10


class SlowListingSim(SimRuntime):
    """A simulated node whose listing is taken at once but answered a second later (an engine under load)."""

    async def list(self) -> Any:
        snapshot = await super().list()
        await asyncio.sleep(1.0)
        return snapshot


async def test_reconcile_never_reports_a_container_created_while_the_engine_was_listed(js: Any, nc: Any) -> None:
    node = "sim-d"
    runtime = SlowListingSim(node)
    events = await Collector(ContainerEvent).start(nc, f"eru.container.{node}.*")
    async with running_agent(js, runtime, node, heartbeat_interval_seconds=3600) as agent:
        listing = asyncio.create_task(agent.reconcile())
        await asyncio.sleep(0.1)
        command = create(node, workload("sim"), Allocation(memory=MiB))
        await send(js, command)
        assert (await events.wait_for(lambda e: e.command_id == command.command_id)).kind == "started"
        assert not listing.done()  # the create finished while the engine was being listed
        await listing
        assert command.container_id in agent.state.containers
        assert [e.kind for e in events.models() if e.container_id == command.container_id] == ["started"]


async def test_a_loaded_nodes_reports_and_what_its_reconcile_finds_reach_the_bus(js: Any, nc: Any) -> None:
    # per-node work a sim process does at every beat and report, cut (docs/performance.md "Where the sim agents'
    # time goes at 5,000 nodes"): the reconcile's envelope made only for an event, a listing report's news not
    # spelled out. What reaches the bus is the same: the exit found by the beat, caused by one `eru.node.reconciled`;
    # a sample every interval while loaded; once empty, its first sample, then none until the floor.
    node = "sim-e"
    clock = Clock()
    runtime = SimRuntime(node, clock=clock)
    events = await Collector(ContainerEvent).start(nc, f"eru.container.{node}.*")
    samples = await Collector(NodeMetrics).start(nc, f"eru.metrics.{node}")
    async with running_agent(js, runtime, node) as agent:
        exits = create(node, workload("sim", labels={EXIT_AFTER_LABEL: "5"}), Allocation(memory=MiB))
        stays = create(node, workload("sim"), Allocation(memory=MiB))
        for command in (exits, stays):
            await send(js, command)
            assert (await events.wait_for(lambda e, c=command: e.command_id == c.command_id)).kind == "started"
        clock.now += 10
        stopped = await events.wait_for(lambda e: e.container_id == exits.container_id and e.kind == "stopped")
        assert stopped.reason == "exited with code 0"
        (headers,) = [h for _, e, h in events.items if e is stopped]
        assert headers[H_CAUSATION] not in ("", headers[H_ID])
        await samples.wait_until(lambda: sum(1 for s in samples.models() if s.containers) >= 3)
        await send(js, NodeCommand(command_id=new_id(), node=node, kind="remove", container_id=stays.container_id))
        await send(js, NodeCommand(command_id=new_id(), node=node, kind="remove", container_id=exits.container_id))
        await events.wait_until(lambda: sum(1 for e in events.models() if e.kind == "removed") == 2)
        await samples.wait_until(lambda: any(not s.containers for s in samples.models()))
        skipped = agent.samples_skipped
        deadline = time.monotonic() + 30
        while agent.samples_skipped < skipped + 2:  # two more intervals: nothing new, under the floor
            assert time.monotonic() < deadline, "the empty node's samples were not taken"
            await asyncio.sleep(0.1)
        assert sum(1 for s in samples.models() if not s.containers) == 1
