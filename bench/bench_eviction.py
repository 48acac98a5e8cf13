"""Eviction service figures (issue 6): samples per second of one replica, and sample → eviction command latency.

Prints one JSON document:

* `policy`: `NodeTracker.observe` alone on decoded `NodeMetrics` (no bus, no decoding);
* `replica`: one replica's hot path against a real nats-server: core subscription on `eru.metrics.*`, msgpack +
  pydantic decoding, the policy, and its publications; a separate process plays the node agents and publishes as
  fast as it can; the figure is samples handled / time from the first sample's arrival to the last one handled;
* `latency`: for `latency_nodes` nodes whose window already holds every CPU condition but the newest sample's, the
  time from publishing the sample that completes the conditions to the `evict` command reaching a subscriber (a
  stand-in for the node agent), p50/p99/max in ms; `latency_loaded` the same while another process publishes
  `--background` samples/s of 500 other nodes to the same replica.

A "container sample" is one container's figures inside a node sample (`containers_per_node` of them per sample).
Usage: python bench/bench_eviction.py [--nodes 200] [--samples 20000] [--containers 20] [--latency-nodes 200]
       [--background 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from typing import Any

from eru.bus import connect, decode, encode, provision_streams
from eru.bus.envelope import H_CONTENT_TYPE, new_envelope
from eru.colocation.config import ColocationConfig
from eru.colocation.tracker import NodeTracker
from eru.domain import ContainerMetrics, NodeCommand, NodeMetrics
from eru.settings import EvictionSettings
from eru.testing.nats_server import NatsServer
from eru_eviction.handlers import EvictionEngine

GIB = 1024**3


def node_sample(
    node: str, at: float, containers: int, *, batch_used: float = 0.5, allowed: float | None = None
) -> NodeMetrics:
    """A 64-core node: a fifth prod, a fifth mid, the rest batch (1 core requested each), calm unless told."""
    items = []
    for index in range(containers):
        klass = "prod" if index < containers // 5 else "mid" if index < 2 * containers // 5 else "batch"
        items.append(
            ContainerMetrics(
                container_id=f"c{index}",
                priority_class=klass,
                priority=index,
                tenant="t",
                cpu_used=batch_used if klass == "batch" else 0.5,
                memory_used=GIB,
                cpu_request=1.0,
                memory_request=GIB,
            )
        )
    batch = sum(1 for c in items if c.priority_class == "batch")
    return NodeMetrics(
        node=node,
        time=at,
        cpu_capacity=64,
        cpu_used=20.0 + batch * batch_used,
        memory_used=30 * GIB,
        memory_total=128 * GIB,
        batch_cpu_allowed=allowed,
        containers=items,
    )


def bench_policy(nodes: int, samples: int, containers: int) -> dict[str, Any]:
    config = ColocationConfig()
    trackers = {f"n{i}": NodeTracker(f"n{i}", config) for i in range(nodes)}
    rounds = max(1, samples // nodes)
    batch = [node_sample(f"n{i}", 1000.0 + 5 * r, containers) for r in range(rounds) for i in range(nodes)]
    started = time.perf_counter()
    for sample in batch:
        trackers[sample.node].observe(sample, sample.time)
    elapsed = time.perf_counter() - started
    return {
        "node_samples_per_s": round(len(batch) / elapsed),
        "container_samples_per_s": round(len(batch) * containers / elapsed),
        "node_samples": len(batch),
    }


async def publish_samples(url: str, nodes: int, samples: int, containers: int, rate: float = 0.0) -> None:
    """The node agents' side (run in its own process): publish `samples` node samples, at `rate` per second if > 0.

    Without a rate the bodies are encoded first and sent as fast as possible (old times: they decide nothing);
    with one, each sample is encoded when it is sent, stamped with the current time, until `samples` were sent.
    """
    publisher = await connect(url, name="bench-eviction-agents")
    headers = {**new_envelope("eru.metrics", "bench").to_headers(), H_CONTENT_TYPE: "application/msgpack"}
    headers.pop("Nats-Msg-Id")  # every sample is its own message for JetStream's duplicate window
    if rate > 0:
        started = time.perf_counter()
        for index in range(samples):
            node = f"bg{index % nodes}"
            await publisher.publish(
                f"eru.metrics.{node}", encode(node_sample(node, time.time(), containers)), headers=headers
            )
            if index % 50 == 49:
                await publisher.flush()
                await asyncio.sleep(max(0.0, started + (index + 1) / rate - time.perf_counter()))
        await publisher.close()
        return
    now = time.time()
    rounds = max(1, -(-samples // nodes))
    bodies = [
        (f"eru.metrics.n{i}", encode(node_sample(f"n{i}", now - 5 * (rounds - r), containers)))
        for r in range(rounds)
        for i in range(nodes)
    ][:samples]
    for index, (subject, body) in enumerate(bodies):
        await publisher.publish(subject, body, headers=headers)
        if index % 500 == 499:
            await publisher.flush()
    await publisher.flush()
    await publisher.close()


async def bench_replica(url: str, nodes: int, samples: int, containers: int) -> dict[str, Any]:
    engine_nc = await connect(url, name="bench-eviction-replica")
    js = engine_nc.jetstream()
    await provision_streams(js)
    engine = EvictionEngine(js, replica="bench", settings=EvictionSettings())
    first: list[float] = []
    last = [0.0]

    async def on_message(msg: Any) -> None:
        if not first:
            first.append(time.perf_counter())
        await engine.on_message(msg)
        last[0] = time.perf_counter()

    await engine_nc.subscribe("eru.metrics.*", cb=on_message, pending_msgs_limit=samples + 10, pending_bytes_limit=0)
    await engine_nc.flush()
    agents = await asyncio.create_subprocess_exec(
        *(sys.executable, __file__, "--publish-to", url, "--nodes", str(nodes), "--samples", str(samples)),
        *("--containers", str(containers)),
    )
    await agents.wait()
    # All handled, or no progress for 5 s (a server drops messages for a client that falls too far behind).
    while engine.stats.samples < samples and (not first or time.perf_counter() - last[0] < 5):  # noqa: ASYNC110
        await asyncio.sleep(0.2)
    elapsed = last[0] - first[0]
    result = {
        "node_samples_per_s": round(engine.stats.samples / elapsed),
        "container_samples_per_s": round(engine.stats.samples * containers / elapsed),
        "node_samples": engine.stats.samples,
        "lost_as_slow_consumer": samples - engine.stats.samples,
        "handled_seconds": round(elapsed, 3),
        "conditions_published": engine.stats.conditions,
        "rejected": engine.stats.rejected,
    }
    await engine.drain()
    await engine_nc.close()
    return result


async def bench_latency(url: str, nodes: int, containers: int, background: float = 0.0) -> dict[str, Any]:
    """Sample → evict command latency; `background` node samples/s of other nodes flow meanwhile if > 0."""
    replica_nc = await connect(url, name="bench-latency-replica")
    agent = await connect(url, name="bench-latency-agent")
    js = replica_nc.jetstream()
    await provision_streams(js)
    watermarks = {"window_seconds": 10, "metrics_interval_seconds": 1, "cpu_cooldown_seconds": 1}
    engine = EvictionEngine(js, replica="bench", settings=EvictionSettings(watermarks=watermarks))
    await replica_nc.subscribe("eru.metrics.*", cb=engine.on_message)
    arrived: dict[str, float] = {}
    waiting: dict[str, asyncio.Event] = {}

    async def on_command(msg: Any) -> None:
        command = decode(msg.data, NodeCommand)
        if command.kind == "evict" and command.node not in arrived:
            arrived[command.node] = time.perf_counter()
            waiting[command.node].set()

    await agent.subscribe("eru.node.*.cmd.evict", cb=on_command)
    await agent.flush()
    await replica_nc.flush()
    others = None
    if background > 0:
        others = await asyncio.create_subprocess_exec(
            *(sys.executable, __file__, "--publish-to", url, "--nodes", "500", "--containers", str(containers)),
            *("--samples", str(int(background * 600)), "--rate", str(background)),
        )
        await asyncio.sleep(1.0)
    batch = containers - 2 * (containers // 5)
    # Suppressed to `allowed` cores; batch uses all of it (util 100 %, satisfaction allowed / batch) and the node is
    # over 75 %: the window holds every condition. The prefill's newest sample uses 70 % of the allowance, so the
    # newest-utilisation condition is false until the completing sample.
    allowed = batch * 0.3
    latencies: list[float] = []
    handled_before = engine.stats.samples
    measure_started = time.perf_counter()
    for index in range(nodes):
        node = f"{'busy' if background > 0 else 'lat'}{index}"
        waiting[node] = asyncio.Event()
        now = time.time()
        full = allowed / batch
        for age in (4, 3, 2):  # 3 samples: below the coverage of 4 (a third of 10 expected)
            sample = node_sample(node, now - age, containers, batch_used=full, allowed=allowed)
            sample = sample.model_copy(update={"cpu_used": 50.0})
            await agent.publish(f"eru.metrics.{node}", encode(sample))
        calm = node_sample(node, now - 1, containers, batch_used=full * 0.7, allowed=allowed)
        await agent.publish(f"eru.metrics.{node}", encode(calm.model_copy(update={"cpu_used": 50.0})))
        await agent.flush()
        await asyncio.sleep(0.01)
        last = node_sample(node, time.time(), containers, batch_used=full, allowed=allowed)
        body = encode(last.model_copy(update={"cpu_used": 50.0}))
        sent = time.perf_counter()
        await agent.publish(f"eru.metrics.{node}", body)
        await agent.flush()
        await asyncio.wait_for(waiting[node].wait(), timeout=10)
        latencies.append((arrived[node] - sent) * 1000)
    measured = max(1e-9, time.perf_counter() - measure_started)
    if others is not None:
        others.terminate()
        await others.wait()
    await agent.close()
    await replica_nc.close()
    ordered = sorted(latencies)
    return {
        "nodes": nodes,
        "background_node_samples_per_s": background,
        "background_handled_per_s": round((engine.stats.samples - handled_before - 5 * nodes) / measured, 1),
        "p50_ms": round(statistics.median(ordered), 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 3),
        "max_ms": round(ordered[-1], 3),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--containers", type=int, default=20)
    parser.add_argument("--latency-nodes", type=int, default=200)
    parser.add_argument("--background", type=float, default=1000.0, help="node samples/s during the loaded latency")
    parser.add_argument("--publish-to", help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.publish_to:
        await publish_samples(args.publish_to, args.nodes, args.samples, args.containers, args.rate)
        return
    server = NatsServer()
    server.start()
    try:
        report = {
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load": os.getloadavg()[0]},
            "containers_per_node": args.containers,
            "policy": bench_policy(args.nodes, args.samples, args.containers),
            "replica": await bench_replica(server.url, args.nodes, args.samples, args.containers),
            "latency": await bench_latency(server.url, args.latency_nodes, args.containers),
            "latency_loaded": await bench_latency(server.url, args.latency_nodes, args.containers, args.background),
            "goals": {"container_samples_per_s": 50_000, "latency_p99_ms": 100},
        }
    finally:
        server.stop()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
