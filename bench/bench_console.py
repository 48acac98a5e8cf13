"""The web console with many nodes: how long a page of node cards takes, filtered or not, and how long a container
event takes from the bus to a browser's event stream (docs/console.md).

A real nats-server and PostgreSQL, the distributor and one allocator in this process (the pipeline test harness), a
scripted node agent for 2 nodes, `--nodes` more nodes added by `set-node` (8 cores, 32 GiB each), and the console's
aiohttp server in this process on a free loopback port, read over HTTP with a session cookie. Per figure: `--rounds`
requests, median and p90 in ms. Prints JSON.

Usage: python bench/bench_console.py [--nodes 1000] [--rounds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from eru.bus import request
from eru.bus.subjects import allocator_operation
from eru.console.launch import ConsoleInfo
from eru.console.server import serve
from eru.domain.messages import OperationReply, SetNodeRequest
from eru.logging import configure_logging
from eru.store import apply_migrations, create_pool
from eru.testing.nats_server import NatsServer
from eru.testing.postgres_server import EmbeddedPostgres

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration" / "pipeline"))
from pipeline_harness import GiB, Pipeline, ScriptedNodeAgent


def _figures(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(1000 * statistics.median(ordered), 1),
        "p90_ms": round(1000 * ordered[max(0, int(len(ordered) * 0.9) - 1)], 1),
    }


async def _timed(session: aiohttp.ClientSession, url: str, rounds: int) -> dict[str, float]:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        async with session.get(url) as response:
            assert response.status == 200, await response.text()
            await response.read()
        samples.append(time.perf_counter() - started)
    return _figures(samples)


async def _event_latency(session: aiohttp.ClientSession, base: str, pipe: Pipeline, rounds: int) -> dict[str, float]:
    """From sending a deploy request to its first `container` event in the browser's stream."""
    samples = []
    async with session.get(base + "api/stream") as stream:
        for _ in range(rounds):
            started = time.perf_counter()
            await pipe.deploy(pod="p1", count=1, workload={"name": "web", "image": "busybox"})
            async for line in stream.content:
                if line.startswith(b"event: container"):
                    break
            samples.append(time.perf_counter() - started)
    return _figures(samples)


async def scenario(nats_url: str, dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    pipe = Pipeline(nats_url, dsn)
    await pipe.start()
    agent = ScriptedNodeAgent(pipe.nc)
    await agent.start()
    stop = asyncio.Event()
    ready: asyncio.Future[ConsoleInfo] = asyncio.get_running_loop().create_future()
    state_dir = Path(tempfile.mkdtemp(prefix="eru-bench-console-"))
    server = asyncio.create_task(
        serve(nats_url, host="127.0.0.1", port=0, state_dir=state_dir, on_ready=ready.set_result, stop=stop)
    )
    try:
        for name in ("n1", "n2"):
            await pipe.register(name, cores=16, memory=64 * GiB)
        limit = asyncio.Semaphore(32)

        async def add(index: int) -> None:
            node = SetNodeRequest(
                node=f"big-{index:04d}", pod="big", cpu_map={str(c): 100 for c in range(8)}, memory=32 * GiB
            )
            async with limit:
                await request(pipe.nc, allocator_operation("set-node"), node, OperationReply, 30)

        await asyncio.gather(*(add(index) for index in range(1, args.nodes + 1)))
        info = await asyncio.wait_for(ready, 30)
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:  # IP host
            async with session.get(info.login_url(time.time())) as login:
                assert login.status == 200
            base = info.url
            return {
                "nodes": args.nodes + 2,
                "first_page_24_cards": await _timed(session, base + "api/nodes?limit=24", args.rounds),
                "filtered_to_one": await _timed(session, base + "api/nodes?q=big-0999&limit=24", args.rounds),
                "last_page": await _timed(session, base + f"api/nodes?offset={args.nodes - 10}&limit=24", args.rounds),
                "deploys_list": await _timed(session, base + "api/deploys?limit=200", args.rounds),
                "deploy_request_to_container_event_in_stream": await _event_latency(session, base, pipe, args.rounds),
            }
    finally:
        stop.set()
        await asyncio.wait_for(server, 30)
        await agent.stop()
        await pipe.close()


async def main_async(args: argparse.Namespace) -> None:
    configure_logging("bench", "bench", log_format="json", level="warning")
    with tempfile.TemporaryDirectory(prefix="eru-bench-console-") as tmp:
        root = Path(tmp)
        postgres = EmbeddedPostgres(root / "postgres")
        postgres.start()
        nats = NatsServer(store_dir=root / "nats")
        nats.start()
        try:
            postgres.create_database("eru")
            dsn = postgres.dsn_for("eru")
            pool = await create_pool(dsn, min_size=1, max_size=2)
            await apply_migrations(pool)
            await pool.close()
            result = await scenario(nats.url, dsn, args)
        finally:
            nats.stop()
            postgres.stop()
    print(json.dumps({"machine": platform.machine(), "cpus": os.cpu_count(), "result": result}, indent=2))


def main() -> None:
    """Parse the options and run."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=30)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
