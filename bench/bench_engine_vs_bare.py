"""eru's node agent against a bare Engine-API client on the same Docker engine (`bench_node_agent.py --engine-vs-bare`).

eru: one `NodeCommands` batch of N creates to one Docker node (what the allocator sends for a deploy's containers on
a node); request → running is from publishing the batch to receiving each container's `started`. Bare: an aiodocker
client sends every create at once and starts each container as soon as it is created; request → running is from
sending its create to its start being answered. Both create the same containers (busybox `sleep 600`, 16 MiB,
the HostConfig eru's engine mapping gives). Runs alternate (bare first, every other round backwards); every run's
containers are removed before the next one starts (not timed).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from pathlib import Path
from typing import Any

import aiodocker

from eru.bus import decode, new_envelope, new_id, publish
from eru.bus.subjects import node_command
from eru.domain.messages import ContainerEvents, ContainerReport, ContainerSpec, NodeCommand, NodeCommands, Workload
from eru.domain.resources import Allocation
from eru.embedded.docker_image import engine_problem, ensure_test_image
from eru.nodeagent.engine import engine_resources
from eru.testing.docker_image import remove_containers
from eru_node_agent.agent import AgentConfig, NodeAgent
from eru_node_agent.runtime.docker import DockerRuntime
from eru_node_agent.state import FileStateStore

MIB = 1024**2
ALLOCATION = Allocation(memory=16 * MIB)
BARE_LABEL = "eru.bench.bare"


def summary(latencies: list[float], began: float, ended: float) -> dict[str, float]:
    """p50 / p99 request → running (s) and throughput (containers/s until the last one ran)."""
    ordered = sorted(latencies)
    return {
        "p50_s": round(statistics.median(ordered), 2),
        "p99_s": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
        "first_s": round(ordered[0], 2),
        "throughput_per_s": round(len(ordered) / (ended - began), 2),
    }


async def bare_run(image: str, count: int, cores: list[str]) -> dict[str, float]:
    """A bare client: every create at once, each container started as soon as it exists."""
    run = f"bare{os.getpid()}-{new_id()[-6:]}"
    config = {
        "Image": image,
        "Cmd": ["sleep", "600"],
        "Labels": {BARE_LABEL: run},
        "HostConfig": {**engine_resources(ALLOCATION, cores).host_config(), "NetworkMode": "none"},
    }
    docker = aiodocker.Docker()
    latencies: list[float] = []
    try:
        began = time.monotonic()

        async def one(index: int) -> None:
            container = await docker.containers.create(config, name=f"{run}-{index}")
            await container.start()
            latencies.append(time.monotonic() - began)

        await asyncio.gather(*(one(i) for i in range(count)))
        ended = time.monotonic()
    finally:
        await docker.close()
        await remove_containers(BARE_LABEL, run)
    return summary(latencies, began, ended)


async def eru_run(nc: Any, js: Any, image: str, count: int, bound: int, state_dir: Path) -> dict[str, float]:
    """One Docker node's agent (engine_concurrency `bound`) answering a batch of `count` creates."""
    node = f"bench{os.getpid()}{new_id()[-6:]}"
    runtime = DockerRuntime()
    config = AgentConfig(
        node=node, metrics_interval_seconds=3600, heartbeat_interval_seconds=3600, engine_concurrency=bound
    )
    agent = NodeAgent(config, runtime, js, FileStateStore(state_dir / f"{node}.json"))
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    received: dict[str, float] = {}
    everything = asyncio.Event()

    async def on_report(msg: Any) -> None:
        report = decode(msg.data, ContainerReport, (msg.headers or {}).get("Content-Type")).root
        for event in report.events if isinstance(report, ContainerEvents) else [report]:
            if event.kind == "started":
                received.setdefault(event.container_id, time.monotonic())
        if len(received) >= count:
            everything.set()

    subscription = await nc.subscribe(f"eru.container.{node}.*", cb=on_report)
    try:
        await asyncio.wait_for(agent.started.wait(), timeout=60)
        commands = []
        workload = Workload(name="bench", image=image, command=["sleep", "600"])
        for _ in range(count):
            cid = f"b{new_id().replace('-', '')[-16:]}"
            spec = ContainerSpec(container_id=cid, deploy_id="bench", workload=workload, allocation=ALLOCATION)
            commands.append(NodeCommand(command_id=new_id(), node=node, kind="create", container_id=cid, spec=spec))
        batch = NodeCommands(batch_id=new_id(), node=node, commands=commands)
        began = time.monotonic()
        await publish(js, node_command(node, "batch"), batch, new_envelope("eru.node.cmd.batch", "bench"))
        await asyncio.wait_for(everything.wait(), timeout=600)
        latencies = [at - began for at in received.values()]
        return summary(latencies, began, max(received.values()))
    finally:
        await subscription.unsubscribe()
        stop.set()
        await asyncio.wait_for(task, timeout=60)
        await runtime.close()
        await remove_containers("eru.node", node)


async def engine_vs_bare(
    nc: Any, js: Any, sizes: list[int], bounds: list[int], rounds: int, state_dir: Path
) -> dict[str, Any]:
    """Per N: every run of both clients (interleaved) and eru's ratios to the bare client (medians over rounds)."""
    problem = await engine_problem()
    if problem is not None:
        return {"skipped": problem}
    image = await ensure_test_image()
    probe = DockerRuntime()
    try:
        cores = (await probe.capacity())[0].cores
    finally:
        await probe.close()
    results: dict[str, Any] = {}
    for count in sizes:
        runs: dict[str, list[dict[str, float]]] = {"bare": [], **{f"eru_bound_{b}": [] for b in bounds}}
        order: list[int | None] = [None, *bounds]  # None: the bare client
        for round_ in range(rounds):  # every other round backwards: a drift of the shared machine hits both
            for bound in order if round_ % 2 == 0 else order[::-1]:
                if bound is None:
                    runs["bare"].append(await bare_run(image, count, cores))
                else:
                    runs[f"eru_bound_{bound}"].append(await eru_run(nc, js, image, count, bound, state_dir))
        bare_p50 = statistics.median(r["p50_s"] for r in runs["bare"])
        bare_rate = statistics.median(r["throughput_per_s"] for r in runs["bare"])
        ratios = {
            name: {
                "p50_vs_bare": round(statistics.median(r["p50_s"] for r in rows) / bare_p50, 2),
                "throughput_vs_bare": round(statistics.median(r["throughput_per_s"] for r in rows) / bare_rate, 2),
            }
            for name, rows in runs.items()
            if name != "bare"
        }
        results[f"n{count}"] = {"runs": runs, "ratios": ratios}
    return results
