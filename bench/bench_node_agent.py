"""The node agent: how many simulated nodes one process serves, and how fast commands run (sim and real Docker).

* `sim_scale`: N simulated nodes in this process (one durable consumer, heartbeat and metrics loop each, metrics every
  second): seconds until every node registered and published a sample, then the process's CPU seconds per wall
  second and the metrics samples per second over a steady window.
* `sim_commands`: C create commands spread over the N nodes, all published at once: seconds until every `started`
  event arrived, and per-command latency percentiles (publish → event received).
* `docker` (when an engine answers): K containers of the busybox test image created through the bus at once (the
  agent runs at most 8 at a time), create→started latency percentiles, one in-place update, and the cost of one
  metrics sample of K containers.

* `engine_vs_bare` (`--engine-vs-bare N[,N…]`, only this): N busybox containers as one batch to one Docker node
  (what the allocator sends for a deploy's containers on a node), against a bare Engine-API client (aiodocker)
  creating and starting the same N containers (same HostConfig) all at once, interleaved (bare, eru, … `--rounds`
  times). Per run: request → running p50 / p99 (eru: publishing the batch → each container's `started` received;
  bare: sending its create → its start answered) and throughput (N / until the last one runs); eru's ratios to the
  bare client. `--engine-concurrency 2,4,8` runs eru once per bound (the agent's `engine_concurrency`).

A real nats-server (venv) on loopback; prints JSON. Usage: python bench/bench_node_agent.py [--nodes 200]
[--commands 1000] [--containers 10] [--window 10] | [--engine-vs-bare 50,200 [--rounds 1] [--engine-concurrency 4]]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_engine_vs_bare import engine_vs_bare
from eru.bus import connect, decode, new_envelope, new_id, provision_streams, publish
from eru.bus.subjects import node_command
from eru.domain.messages import ContainerEvent, ContainerSpec, NodeCommand, NodeMetrics, Workload
from eru.domain.resources import Allocation
from eru.embedded.docker_image import engine_problem, ensure_test_image
from eru.settings import load_settings
from eru.testing.docker_image import remove_containers
from eru.testing.nats_server import NatsServer
from eru_node_agent.agent import AgentConfig, NodeAgent
from eru_node_agent.app import build_agents
from eru_node_agent.runtime.docker import DockerRuntime
from eru_node_agent.state import FileStateStore

MIB = 1024**2


def percentiles(values: list[float]) -> dict[str, float]:
    """p50 / p95 / max in milliseconds."""
    ordered = sorted(values)
    if not ordered:
        return {}
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
    }


def create_command(node: str, image: str, allocation: Allocation) -> NodeCommand:
    cid = f"b{new_id().replace('-', '')[-16:]}"
    workload = Workload(name="bench", image=image, command=["sleep", "600"])
    spec = ContainerSpec(container_id=cid, deploy_id="bench", workload=workload, allocation=allocation)
    return NodeCommand(command_id=new_id(), node=node, kind="create", container_id=cid, spec=spec)


async def send(js: Any, command: NodeCommand) -> None:
    envelope = new_envelope(f"eru.node.cmd.{command.kind}", "bench", message_id=new_id())
    await publish(js, node_command(command.node, command.kind), command, envelope)


async def run_commands(nc: Any, js: Any, commands: list[NodeCommand], subject: str) -> tuple[float, float, list[float]]:
    """Publish all commands at once; (seconds until all were published, seconds until every result arrived,
    per-command latencies from its publish)."""
    sent: dict[str, float] = {}
    latencies: list[float] = []
    done = asyncio.Event()

    async def on_event(msg: Any) -> None:
        event = decode(msg.data, ContainerEvent, (msg.headers or {}).get("Content-Type"))
        if event.command_id in sent:
            latencies.append(time.monotonic() - sent.pop(event.command_id))
            if not sent:
                done.set()

    subscription = await nc.subscribe(subject, cb=on_event)
    began = time.monotonic()

    async def timed_send(command: NodeCommand) -> None:
        sent[command.command_id] = time.monotonic()
        await send(js, command)

    await asyncio.gather(*(timed_send(command) for command in commands))
    published = time.monotonic() - began
    await asyncio.wait_for(done.wait(), timeout=300)
    await subscription.unsubscribe()
    return published, time.monotonic() - began, latencies


async def bench_sim(nc: Any, js: Any, nodes: int, commands: int, window: float) -> dict[str, Any]:
    settings = load_settings(
        node_agent={"runtime": "sim", "sim_nodes": nodes, "node": "bench", "metrics_interval_seconds": 1.0}
    )
    samples: list[str] = []
    all_sampled = asyncio.Event()

    async def on_sample(msg: Any) -> None:
        samples.append(msg.subject)
        if len(samples) >= nodes and len(set(samples)) == nodes:
            all_sampled.set()

    subscription = await nc.subscribe("eru.metrics.*", cb=on_sample)
    agents = build_agents(settings, js)
    stop = asyncio.Event()
    began = time.monotonic()
    tasks = [asyncio.create_task(agent.run(stop)) for agent in agents]
    await asyncio.wait_for(all_sampled.wait(), timeout=120)
    ready_seconds = time.monotonic() - began
    cpu_before, wall_before, count_before = time.process_time(), time.monotonic(), len(samples)
    await asyncio.sleep(window)
    cpu = (time.process_time() - cpu_before) / (time.monotonic() - wall_before)
    rate = (len(samples) - count_before) / (time.monotonic() - wall_before)
    batch = [create_command(agents[i % nodes].node, "sim", Allocation(memory=MIB)) for i in range(commands)]
    published, total, latencies = await run_commands(nc, js, batch, "eru.container.*.*")
    stop.set()
    await asyncio.gather(*tasks)
    await subscription.unsubscribe()
    return {
        "sim_scale": {
            "nodes": nodes,
            "all_registered_and_sampled_seconds": round(ready_seconds, 2),
            "process_cpu_per_wall_second": round(cpu, 3),
            "metrics_samples_per_second": round(rate, 1),
            "window_seconds": window,
        },
        "sim_commands": {
            "commands": commands,
            "all_started_seconds": round(total, 2),
            "commands_per_second": round(commands / total, 1),
            "publishing_them_seconds": round(published, 2),
            **percentiles(latencies),
        },
    }


async def bench_docker(nc: Any, js: Any, containers: int, state_dir: Path) -> dict[str, Any]:
    problem = await engine_problem()
    if problem is not None:
        return {"skipped": problem}
    image = await ensure_test_image()
    node = f"bench{os.getpid()}"
    runtime = DockerRuntime()
    agent = NodeAgent(
        AgentConfig(node=node, metrics_interval_seconds=3600, heartbeat_interval_seconds=3600),
        runtime,
        js,
        FileStateStore(state_dir / f"{node}.json"),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        await asyncio.wait_for(agent.started.wait(), timeout=60)
        batch = [create_command(node, image, Allocation(cpu_map={"0": 10}, memory=16 * MIB)) for _ in range(containers)]
        _, total, latencies = await run_commands(nc, js, batch, f"eru.container.{node}.*")
        update = NodeCommand(
            command_id=new_id(),
            node=node,
            kind="update",
            container_id=batch[0].container_id,
            allocation=Allocation(cpu_map={"1": 20}, memory=32 * MIB),
        )
        _, _, update_latency = await run_commands(nc, js, [update], f"eru.container.{node}.*")
        await agent.metrics_once(1.0)
        began = time.monotonic()
        sample = NodeMetrics.model_validate(await agent.metrics_once(1.0))
        metrics_seconds = time.monotonic() - began
        return {
            "containers": containers,
            "all_started_seconds": round(total, 2),
            "create_to_started": percentiles(latencies),
            "update_in_place_ms": round(update_latency[0] * 1000, 1),
            "metrics_sample_ms": round(metrics_seconds * 1000, 1),
            "containers_in_sample": len(sample.containers),
        }
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=60)
        await runtime.close()
        await remove_containers("eru.node", node)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as directory:
        server = NatsServer(store_dir=Path(directory) / "nats")
        server.start()
        try:
            nc = await connect(server.url, name="bench-node-agent")
            js = nc.jetstream()
            await provision_streams(js)
            result: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}}
            if args.engine_vs_bare:
                sizes = [int(n) for n in args.engine_vs_bare.split(",")]
                bounds = [int(b) for b in args.engine_concurrency.split(",")]
                result["engine_vs_bare"] = await engine_vs_bare(
                    nc, js, sizes, bounds, args.rounds, Path(directory) / "state"
                )
                await nc.close()
                return result
            result.update(await bench_sim(nc, js, args.nodes, args.commands, args.window))
            result["docker"] = await bench_docker(nc, js, args.containers, Path(directory) / "state")
            await nc.close()
            return result
        finally:
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--commands", type=int, default=1000)
    parser.add_argument("--containers", type=int, default=10)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--engine-vs-bare", default="", help="N[,N…]: eru against a bare Engine-API client only")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds per N (engine-vs-bare)")
    parser.add_argument("--engine-concurrency", default="8", help="the agent's bound(s), comma-separated")
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
