"""Colocation reaction times and quota churn on the real Docker engine (docs/colocation.md "On the real engine").

The scenario of tests/integration/eviction/test_colocation_docker.py (real nats-server, one eviction replica, a real
node agent whose node is its own containers): LS busy loops switched on and off `--cycles` times (on → suppressed,
off → lifted), then `--noise-seconds` of a noisy but steady LS load (one loop always on, the other switched on or off
at random every interval) counting quota commands per batch container-minute, then on a second node a persistent
load (→ CPU eviction by satisfaction) and a 64 MiB memory hog (→ memory eviction). Reactions are counted from the
first sample that shows the condition to the sample that decided, in samples and in seconds of sample time. Prints
JSON.

    python bench/bench_colocation_engine.py --cycles 3 --noise-seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import aiodocker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration" / "eviction"))

from engine_node import BUSY, HOG, MIB, Bus, create, decision_time, engine_agent, ls_command, switch, watch  # noqa: E402
from eviction_helpers import start_replica  # noqa: E402
from test_colocation_docker import EVICT, INTERVAL, LIGHT, LINE, NODE_MEMORY, SUPPRESS  # noqa: E402

from eru.bus.connection import connect  # noqa: E402
from eru.domain.resources import Allocation  # noqa: E402
from eru.testing.docker_image import ensure_test_image, remove_containers  # noqa: E402
from eru.testing.nats_server import NatsServer  # noqa: E402


def reaction(bus: Bus, first: int, decided_at: float) -> dict[str, float]:
    """Samples and sample-seconds from sample `first` to the newest sample taken by the decision."""
    decided = max(i for i, s in enumerate(bus.samples) if s.time <= decided_at)
    return {"samples": decided - first, "seconds": round(bus.samples[decided].time - bus.samples[first].time, 3)}


def first_from(bus: Bus, start: int, test: Any) -> int:
    return next(i for i in range(start, len(bus.samples)) if test(bus.samples[i]))


def ls_cpu(sample: Any, ls: str) -> float:
    return next((c.cpu_used for c in sample.containers if c.container_id == ls), 0.0)


async def quota_commands(bus: Bus, since: int) -> list[Any]:
    return [c for c in bus.commands[since:] if c.kind == "suppress"]


async def suppress_node(nc: Any, js: Any, url: str, image: str, args: argparse.Namespace) -> dict[str, Any]:
    node = f"b{uuid.uuid4().hex[:10]}"
    bus = await watch(nc, node)
    replica = await start_replica(url, "r1", nodes={node: SUPPRESS})
    docker = aiodocker.Docker()
    result: dict[str, Any] = {"on_to_suppressed": [], "off_to_lifted": []}
    try:
        async with engine_agent(js, node, INTERVAL, NODE_MEMORY):
            ls = await create(
                js,
                bus,
                node,
                image,
                ls_command(2),
                priority_class="prod",
                cpu_request=1.5,
                allocation=Allocation(memory=16 * MIB),
                name="ls",
            )
            batch = [
                await create(
                    js,
                    bus,
                    node,
                    image,
                    ["sh", "-c", BUSY],
                    priority_class="batch",
                    cpu_request=0.02,
                    allocation=Allocation(memory=16 * MIB, cpu_limit=0.02),
                    name="bu",
                ),
                await create(
                    js,
                    bus,
                    node,
                    image,
                    ["sh", "-c", LIGHT],
                    priority_class="batch",
                    cpu_request=0.5,
                    allocation=Allocation(cpu_map={"1": 100}, memory=16 * MIB, cpu_bind=True),
                    name="bb",
                ),
            ]
            await bus.until(lambda: len(bus.samples) >= 4, 60, "samples")
            for _ in range(args.cycles):
                start, before = len(bus.samples), len(bus.commands)
                await switch(docker, ls, [0, 1], on=True)
                cut = await bus.until(lambda b=before: [c for c in bus.commands[b:] if c.cpu_quota], 60, "cut")
                first = first_from(bus, start, lambda s: s.cpu_used >= LINE)
                result["on_to_suppressed"].append(reaction(bus, first, decision_time(cut[0])))
                start, before = len(bus.samples), len(bus.commands)
                await switch(docker, ls, [0, 1], on=False)
                lift = await bus.until(
                    lambda b=before: (
                        {c.container_id for c in bus.commands[b:] if c.cpu_quota is None} >= set(batch)
                        and [c for c in bus.commands[b:] if c.cpu_quota is None]
                    ),
                    60,
                    "lift",
                )
                first = first_from(bus, start, lambda s: ls_cpu(s, ls) < LINE / 2)
                result["off_to_lifted"].append(reaction(bus, first, decision_time(lift[-1])))
            # Noise: loop 0 always on, loop 1 on or off at random each interval (flat mean, noisy samples).
            await switch(docker, ls, [0], on=True)
            cuts_before = len(bus.commands)
            await bus.until(lambda: [c for c in bus.commands[cuts_before:] if c.cpu_quota], 60, "noise: first cut")
            start, before = len(bus.samples), len(bus.commands)
            rng = random.Random(1)
            loop = asyncio.get_running_loop()
            end = loop.time() + args.noise_seconds
            while loop.time() < end:
                await switch(docker, ls, [1], on=rng.random() < 0.5)
                count = len(bus.samples)
                await bus.until(lambda n=count: len(bus.samples) > n, 30, "noise sample")
            await switch(docker, ls, [0, 1], on=False)
            samples = bus.samples[start:]
            minutes = (samples[-1].time - samples[0].time) / 60
            changes = await quota_commands(bus, before)
            node_cpu = [s.cpu_used for s in samples]
            result["noise"] = {
                "seconds": round(samples[-1].time - samples[0].time, 1),
                "samples": len(samples),
                "node_cpu_mean": round(statistics.fmean(node_cpu), 4),
                "node_cpu_stdev": round(statistics.pstdev(node_cpu), 4),
                "band_cores": CORES_BAND,
                "share_of_samples_ls_under_line": round(sum(ls_cpu(x, ls) < LINE for x in samples) / len(samples), 3),
                "quota_commands": len(changes),
                "per_container_minute": round(len(changes) / (len(batch) * minutes), 3),
                "kinds": sorted({c.reason for c in changes}),
            }
    finally:
        await docker.close()
        await replica.stop()
        await remove_containers("eru.node", node)
    return result


async def evict_node(nc: Any, js: Any, url: str, image: str) -> dict[str, Any]:
    node = f"b{uuid.uuid4().hex[:10]}"
    bus = await watch(nc, node)
    replica = await start_replica(url, "r1", nodes={node: EVICT})
    docker = aiodocker.Docker()
    result: dict[str, Any] = {}
    try:
        async with engine_agent(js, node, INTERVAL, NODE_MEMORY):
            ls = await create(
                js,
                bus,
                node,
                image,
                ls_command(2),
                priority_class="prod",
                cpu_request=1.5,
                allocation=Allocation(memory=16 * MIB),
                name="ls",
            )
            batch = {
                await create(
                    js,
                    bus,
                    node,
                    image,
                    ["sh", "-c", BUSY],
                    priority_class="batch",
                    cpu_request=0.5,
                    allocation=Allocation(memory=16 * MIB, cpu_limit=0.5),
                    name="bu",
                ),
                await create(
                    js,
                    bus,
                    node,
                    image,
                    ["sh", "-c", BUSY],
                    priority_class="batch",
                    cpu_request=1,
                    allocation=Allocation(cpu_map={"1": 100}, memory=16 * MIB, cpu_bind=True),
                    name="bb",
                ),
            }
            start = len(bus.samples)
            await switch(docker, ls, [0, 1], on=True)
            evicted = await bus.until(
                lambda: (
                    {c.container_id for c in bus.commands if c.kind == "evict"} >= batch
                    and [c for c in bus.commands if c.kind == "evict"]
                ),
                120,
                "cpu eviction",
            )
            first = first_from(bus, start, lambda s: ls_cpu(s, ls) >= LINE / 2)
            result["persistent_to_evicted"] = reaction(bus, first, decision_time(evicted[0]))
            hog = await create(
                js,
                bus,
                node,
                image,
                ["sh", "-c", HOG],
                priority_class="batch",
                cpu_request=0.01,
                allocation=Allocation(memory=96 * MIB),
                name="hog",
            )
            start = len(bus.samples) - 1
            kill = await bus.until(
                lambda: [c for c in bus.commands if c.kind == "evict" and c.container_id == hog], 60, "memory eviction"
            )
            line = NODE_MEMORY * EVICT["memory_evict"] / 100
            first = first_from(bus, start, lambda s: s.memory_used >= line)
            result["hog_to_evicted"] = reaction(bus, first, decision_time(kill[0]))
            await switch(docker, ls, [0, 1], on=False)
    finally:
        await docker.close()
        await replica.stop()
        await remove_containers("eru.node", node)
    return result


CORES_BAND = 2 * SUPPRESS["suppress_hysteresis"] / 100


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--noise-seconds", type=float, default=60.0)
    args = parser.parse_args()
    image = await ensure_test_image()
    with NatsServer(store_dir=Path(tempfile.mkdtemp()) / "nats") as server:
        nc = await connect(server.url, name="bench")
        try:
            js = nc.jetstream()
            out: dict[str, Any] = {"load_average": os.getloadavg()[0], "interval_seconds": INTERVAL}
            out.update(await suppress_node(nc, js, server.url, image, args))
            out.update(await evict_node(nc, js, server.url, image))
            out["load_average_end"] = os.getloadavg()[0]
        finally:
            await nc.close()
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
