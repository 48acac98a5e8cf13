"""The sim node agent under churn: cost per command and memory as containers per node grow (docs/performance.md).

One process runs `--nodes` simulated nodes exactly as `eru up` does (metrics every 2 s, heartbeats every 5 s,
inventories every 30 s) against a real nats-server. For each density D in `--densities` every node is filled to D
containers (create batches), then `--churn` create+remove pairs per node are sent in batches as the allocator does
(one `cmd.batch` per node and deploy) and timed. Per density it prints: commands per second, process CPU
milliseconds per command (the process's CPU over the churn, less what the idle periodic work costs over the same
wall time), idle CPU per wall second at that density (metrics, heartbeats, inventories), and RSS. A last churn phase
at the highest density checks memory after removal: RSS and the agent's remembered commands before and after.

Prints one JSON document. Usage: python -m bench.bench_sim_density [--nodes 16] [--densities 50,200,700]
[--churn 200] [--idle 6] [--profile FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import resource
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from eru import gc_tuning
from eru.bus import connect, decode, new_envelope, new_id, provision_streams, publish
from eru.bus.streams import streams_for
from eru.bus.subjects import node_command
from eru.domain.messages import ContainerEvents, ContainerSpec, NodeCommand, NodeCommands, Workload
from eru.domain.resources import Allocation
from eru.logging import configure_logging
from eru.settings import load_settings
from eru.testing.nats_server import NatsServer
from eru_node_agent.app import build_agents

MIB = 1024**2
BATCH = 5  # containers per node command batch (a 1–5 container deploy places at most 5 on one node)


class GcPauses:
    """Pauses of the cyclic garbage collector per generation (gc.callbacks): the longest and the count."""

    def __init__(self) -> None:
        self.longest = [0.0, 0.0, 0.0]
        self.total = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self._began = 0.0
        gc.callbacks.append(self.on_gc)

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        generation = info["generation"]
        pause = time.perf_counter() - self._began
        self.longest[generation] = max(self.longest[generation], pause)
        self.total[generation] += pause
        self.count[generation] += 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "longest_ms": [round(1000 * value, 1) for value in self.longest],
            "total_ms": [round(1000 * value, 1) for value in self.total],
            "count": self.count,
        }


def rss_mib() -> float:
    """This process's resident set now (from /proc), in MiB."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return round(pages * os.sysconf("SC_PAGE_SIZE") / MIB, 1)


def create(node: str) -> NodeCommand:
    cid = f"c{uuid.uuid4().hex[:16]}"
    workload = Workload(name="soak", image="sim")
    spec = ContainerSpec(container_id=cid, deploy_id=f"d{cid}", workload=workload, allocation=Allocation(memory=MIB))
    return NodeCommand(command_id=new_id(), node=node, kind="create", container_id=cid, spec=spec)


def remove(node: str, container_id: str) -> NodeCommand:
    return NodeCommand(command_id=new_id(), node=node, kind="remove", container_id=container_id, reason="churn")


class Driver:
    """Sends command batches and waits for every batch's `ContainerEvents`."""

    def __init__(self, nc: Any, js: Any) -> None:
        self.nc = nc
        self.js = js
        self.waiting: dict[str, asyncio.Future[None]] = {}
        self.results = 0

    async def on_events(self, msg: Any) -> None:
        report = decode(msg.data, ContainerEvents, (msg.headers or {}).get("Content-Type"))
        self.results += len(report.events)
        for event in report.events:
            future = self.waiting.pop(event.command_id or "", None)
            if future is not None and not future.done():
                future.set_result(None)

    async def send(self, node: str, commands: list[NodeCommand]) -> None:
        loop = asyncio.get_running_loop()
        futures = []
        for command in commands:
            future: asyncio.Future[None] = loop.create_future()
            self.waiting[command.command_id] = future
            futures.append(future)
        batch = NodeCommands(batch_id=new_id(), node=node, commands=commands)
        envelope = new_envelope("eru.node.cmd.batch", "bench", message_id=new_id())
        await publish(self.js, node_command(node, "batch"), batch, envelope)
        await asyncio.wait_for(asyncio.gather(*futures), timeout=600)


async def fill(driver: Driver, nodes: list[str], live: dict[str, list[str]], density: int) -> None:
    async def one(node: str) -> None:
        while len(live[node]) < density:
            batch = [create(node) for _ in range(min(BATCH, density - len(live[node])))]
            await driver.send(node, batch)
            live[node].extend(command.container_id for command in batch)

    await asyncio.gather(*(one(node) for node in nodes))


async def churn(driver: Driver, nodes: list[str], live: dict[str, list[str]], pairs: int) -> int:
    """`pairs` creates and as many removes of the oldest per node, in batches; the commands sent."""

    async def one(node: str) -> int:
        sent = 0
        while sent < 2 * pairs:
            creates = [create(node) for _ in range(BATCH)]
            removes = [remove(node, live[node].pop(0)) for _ in range(BATCH)]
            await asyncio.gather(driver.send(node, creates), driver.send(node, removes))
            live[node].extend(command.container_id for command in creates)
            sent += 2 * BATCH
        return sent

    return sum(await asyncio.gather(*(one(node) for node in nodes)))


async def idle_cpu(seconds: float) -> float:
    before, wall = time.process_time(), time.monotonic()
    await asyncio.sleep(seconds)
    return (time.process_time() - before) / (time.monotonic() - wall)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    configure_logging("node-agent", "bench", log_format="json", level="info")
    thresholds = gc_tuning.tune(args.gc_threshold)  # as the service runner does (eru.service)
    densities = [int(part) for part in args.densities.split(",")]
    with tempfile.TemporaryDirectory() as directory:
        server = NatsServer(store_dir=Path(directory) / "nats")
        server.start()
        try:
            settings = load_settings(
                node_agent={
                    "runtime": "sim",
                    "sim_nodes": args.nodes,
                    "node": "sim",
                    "metrics_interval_seconds": 2.0,
                    "summary_interval_seconds": 60.0,
                }
            )
            nc = await connect(server.url, name="bench-sim-density")
            js = nc.jetstream()
            await provision_streams(js, streams_for(settings))
            driver = Driver(nc, js)
            subscription = await nc.subscribe("eru.container.*.batch", cb=driver.on_events)
            agents = build_agents(settings, js)
            stop = asyncio.Event()
            tasks = [asyncio.create_task(agent.run(stop)) for agent in agents]
            await asyncio.wait_for(asyncio.gather(*(agent.started.wait() for agent in agents)), timeout=120)
            if args.gc_threshold > 0:
                gc_tuning.freeze_started()  # as the service runner does once the service is ready
            nodes = [agent.node for agent in agents]
            live: dict[str, list[str]] = {node: [] for node in nodes}
            profiler = cProfile.Profile() if args.profile else None
            pauses = GcPauses()
            phases = []
            for density in densities:
                await fill(driver, nodes, live, density)
                idle = await idle_cpu(args.idle)
                if profiler is not None and density == densities[-1]:
                    profiler.enable()
                cpu, wall = time.process_time(), time.monotonic()
                commands = await churn(driver, nodes, live, args.churn)
                cpu, wall = time.process_time() - cpu, time.monotonic() - wall
                if profiler is not None and density == densities[-1]:
                    profiler.disable()
                phases.append(
                    {
                        "containers_per_node": density,
                        "commands": commands,
                        "seconds": round(wall, 2),
                        "commands_per_second": round(commands / wall, 1),
                        "cpu_ms_per_command": round(1000 * cpu / commands, 3),
                        "cpu_ms_per_command_less_idle": round(1000 * max(0.0, cpu - idle * wall) / commands, 3),
                        "idle_cpu_per_wall_second": round(idle, 3),
                        "rss_mib": rss_mib(),
                    }
                )
                print(json.dumps(phases[-1]), flush=True)
            # memory after removal: the same churn again at the same density must not grow what is kept
            remembered_before = sum(len(agent.state.commands) for agent in agents)
            rss_before = rss_mib()
            await churn(driver, nodes, live, args.churn)
            await churn(driver, nodes, live, args.churn)
            memory = {
                "rss_mib_before": rss_before,
                "rss_mib_after_two_more_churns": rss_mib(),
                "remembered_commands_before": remembered_before,
                "remembered_commands_after": sum(len(agent.state.commands) for agent in agents),
                "containers_known": sum(len(agent.state.containers) for agent in agents),
                "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "gc_pauses_by_generation": pauses.as_dict(),
            }
            stop.set()
            await asyncio.gather(*tasks)
            await subscription.unsubscribe()
            await nc.close()
            if profiler is not None:
                profiler.dump_stats(args.profile)
            first, last = phases[0], phases[-1]
            return {
                "nodes": args.nodes,
                "gc_thresholds": list(thresholds),
                "phases": phases,
                "memory": memory,
                "ratios_last_over_first": {
                    "containers_per_node": round(last["containers_per_node"] / first["containers_per_node"], 1),
                    "cpu_ms_per_command": round(last["cpu_ms_per_command"] / first["cpu_ms_per_command"], 2),
                    "commands_per_second": round(last["commands_per_second"] / first["commands_per_second"], 2),
                    "idle_cpu_per_wall_second": round(
                        last["idle_cpu_per_wall_second"] / max(first["idle_cpu_per_wall_second"], 1e-3), 2
                    ),
                },
                "load_average": [round(value, 2) for value in os.getloadavg()],
            }
        finally:
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--densities", default="50,200,700")
    parser.add_argument("--churn", type=int, default=100, help="create+remove pairs per node per density")
    parser.add_argument("--idle", type=float, default=6.0, help="seconds of idle measurement per density")
    parser.add_argument("--profile", default=None, help="cProfile the last density's churn into this file")
    parser.add_argument(
        "--gc-threshold",
        type=int,
        default=gc_tuning.DEFAULT_THRESHOLD,
        help="young-generation GC threshold as ERU_GC_THRESHOLD (0: leave the interpreter's, no freeze)",
    )
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
