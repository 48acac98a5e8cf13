"""How eru's cost grows with the cluster: N sim nodes (32 cores, 64 GiB each), 10,000 containers deployed through the
running services of `eru up`, for N = 100, 300, 1,000 and 5,000 (docs/performance.md "Scale").

For each N: a fresh `eru up --detach` (embedded NATS and PostgreSQL, auth on, no console) with `--sim-nodes N
--sim-node-cpus 32 --sim-node-memory 64GiB` and the given `--replicas`; wait until every node is registered; publish
all the requests at once (default 100 requests of 100 containers, each 0.25 core and 512 MiB) and wait for every
deploy's terminal event; then read the RSS of each process of the stack (PostgreSQL: the sum of its processes' PSS),
the CPU seconds each spent during the burst, the PostgreSQL database size and the JetStream store size; `eru down`.

Usage: python bench/bench_scale.py [--nodes 100,300,1000,5000] [--containers 10000] [--request-size 100]
                                   [--replicas allocator=1 ...] [--agents 1] [--profile DIR]
Prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import psutil

from eru.bus import connect, new_envelope, publish
from eru.bus.codec import decode
from eru.bus.subjects import DEPLOY_REQUEST
from eru.domain import DeployEvent, DeployRequest
from eru.logging import configure_logging
from eru.testing.nats_server import free_port

TERMINAL = ("completed", "partial", "failed")
ERU = [sys.executable, "-m", "eru.cli"]


def eru(*args: str, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the `eru` command as a user would."""
    return subprocess.run(
        [*ERU, *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


def tree(pid: int) -> list[psutil.Process]:
    """The process and its descendants (those still alive)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def cpu_seconds(processes: dict[str, int]) -> dict[str, float]:
    """CPU seconds (user + system) used so far by each named process tree."""
    totals: dict[str, float] = {}
    for name, pid in processes.items():
        total = 0.0
        for process in tree(pid):
            try:
                times = process.cpu_times()
                total += times.user + times.system
            except psutil.NoSuchProcess:
                continue
        totals[name] = total
    return totals


def memory_mib(processes: dict[str, int]) -> dict[str, float]:
    """RSS of each process in MiB; PostgreSQL as the sum of its processes' PSS (shared buffers counted once)."""
    found: dict[str, float] = {}
    for name, pid in processes.items():
        total = 0
        for process in tree(pid) if name == "postgres" else tree(pid)[:1]:
            try:
                total += process.memory_full_info().pss if name == "postgres" else process.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        found[name] = round(total / 1024**2, 1)
    return found


def directory_mib(path: Path) -> float:
    """Bytes under `path` in MiB."""
    return round(sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1024**2, 1)


def requests_for(containers: int, size: int, tag: str) -> list[DeployRequest]:
    """`containers` containers as requests of `size` (the last one smaller), each 0.25 core and 512 MiB."""
    requests = []
    for index, start in enumerate(range(0, containers, size)):
        requests.append(
            DeployRequest.model_validate(
                {
                    "request_id": f"{tag}-{index}",
                    "pod": "default",
                    "count": min(size, containers - start),
                    "mode": "auto",
                    "workload": {
                        "name": f"{tag}-{index % 20}",
                        "image": "busybox",
                        "resources": {"cpu_request": 0.25, "memory_request": "512MiB"},
                    },
                }
            )
        )
    return requests


async def burst(nats_url: str, requests: list[DeployRequest], within: float) -> dict[str, Any]:
    """Publish every request at once and wait for every deploy's terminal event."""
    nc = await connect(nats_url, name="bench-scale")
    js = nc.jetstream()
    outcome: dict[str, str] = {}
    started_containers = 0
    all_done = asyncio.Event()
    last = 0.0

    async def on_event(msg: Any) -> None:
        nonlocal started_containers, last
        if msg.subject == DEPLOY_REQUEST:
            return
        event = decode(msg.data, DeployEvent)
        if event.kind in TERMINAL and event.deploy_id not in outcome:
            outcome[event.deploy_id] = event.kind
            last = time.perf_counter()
            if len(outcome) == len(requests):
                all_done.set()

    await nc.subscribe("eru.deploy.*.*", cb=on_event)
    await nc.flush()
    started = time.perf_counter()
    for request in requests:
        await publish(js, DEPLOY_REQUEST, request, new_envelope("eru.deploy.request", "bench-scale"))
    published = time.perf_counter() - started
    try:
        await asyncio.wait_for(all_done.wait(), within)
    finally:
        await nc.close()
    seconds = last - started
    containers = sum(r.count for r in requests)
    return {
        "requests": len(requests),
        "containers": containers,
        "seconds": round(seconds, 2),
        "publish_seconds": round(published, 2),
        "containers_per_second": round(containers / seconds, 1),
        "outcomes": {kind: list(outcome.values()).count(kind) for kind in TERMINAL},
    }


async def wait_for_nodes(dsn: str, nodes: int, within: float) -> float:
    """Seconds until `nodes` nodes are registered and up."""
    started = time.perf_counter()
    conn = await asyncpg.connect(dsn)
    try:
        while await conn.fetchval("SELECT count(*) FROM nodes") < nodes:
            if time.perf_counter() - started > within:
                raise RuntimeError(f"only {await conn.fetchval('SELECT count(*) FROM nodes')} of {nodes} registered")
            await asyncio.sleep(0.5)
    finally:
        await conn.close()
    return time.perf_counter() - started


async def database_mib(dsn: str) -> tuple[float, int]:
    """The database's size in MiB and its container rows."""
    conn = await asyncpg.connect(dsn)
    try:
        size = await conn.fetchval("SELECT pg_database_size(current_database())")
        rows = await conn.fetchval("SELECT count(*) FROM containers")
    finally:
        await conn.close()
    return round(size / 1024**2, 1), int(rows)


PG_COUNTERS_SQL = """
SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) AS commits,
       (SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'nodes') AS node_updates,
       (SELECT seq_tup_read + coalesce(idx_tup_fetch, 0) FROM pg_stat_user_tables WHERE relname = 'nodes')
           AS node_rows_read
"""


async def pg_counters(dsn: str) -> dict[str, int]:
    """PostgreSQL's cumulative counters: commits, updates and row reads of `nodes` (what per-node work costs)."""
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow(PG_COUNTERS_SQL)
    finally:
        await conn.close()
    return {key: int(value or 0) for key, value in dict(row).items()}


def start_profiles(processes: dict[str, int], directory: Path) -> list[subprocess.Popen[bytes]]:
    """`py-spy record` (raw folded stacks, 50 Hz) of every Python process of the stack until stopped."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    directory.mkdir(parents=True, exist_ok=True)
    started = []
    for name, pid in processes.items():
        if name in ("postgres", "nats-server") or name.startswith("nats-"):
            continue
        out = directory / f"{name}.txt"
        command = [spy, "record", "--pid", str(pid), "--rate", "50", "--format", "raw", "--nonblocking", "-o", str(out)]
        started.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return started


def stop_profiles(profilers: list[subprocess.Popen[bytes]]) -> None:
    """Stop every `py-spy record` (SIGINT: it writes its file) and wait for it."""
    for profiler in profilers:
        profiler.send_signal(signal.SIGINT)
    for profiler in profilers:
        with contextlib.suppress(subprocess.TimeoutExpired):
            profiler.wait(timeout=30)


def per_second(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    """CPU seconds per second of each process between two readings."""
    return {name: round((after[name] - before.get(name, 0.0)) / seconds, 3) for name in sorted(after)}


async def one_scale(nodes: int, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """A fresh stack of `nodes` sim nodes, the burst, the figures, the stack stopped."""
    state = root / f"n{nodes}"
    agents = max(1, min(args.agents, nodes))
    replicas = [f"node-agent={agents}", *args.replicas]
    up = ["up", "--state-dir", str(state), "--detach", "--no-console", "--sim-nodes", str(nodes)]
    up += ["--nats-port", str(free_port()), "--postgres-port", str(free_port())]
    up += ["--sim-node-cpus", "32", "--sim-node-memory", "64GiB"]
    for value in replicas:
        up += ["--replicas", value]
    metrics = {"ERU_NODE_AGENT__METRICS_INTERVAL_SECONDS": str(args.metrics_interval)} if args.metrics_interval else {}
    started = eru(*up, env=metrics)
    if started.returncode != 0:
        raise RuntimeError(f"eru up failed: {started.stdout}{started.stderr}")
    try:
        info = json.loads((state / "stack.json").read_text())
        registered = await wait_for_nodes(info["database_dsn"], nodes, args.register_within)
        await asyncio.sleep(2.0)  # every consumer is up, the first heartbeats are in
        # read again: a process the supervisor restarted meanwhile has a new pid (the old one read as 0 CPU seconds)
        info = json.loads((state / "stack.json").read_text())
        restarts_before = dict(info.get("restarts") or {})
        processes = {**info["processes"], **info["server_pids"]}
        idle_before = cpu_seconds(processes)
        await asyncio.sleep(args.idle_seconds)  # what N nodes cost while nothing is deployed
        idle = per_second(idle_before, cpu_seconds(processes), args.idle_seconds)
        profilers = start_profiles(info["processes"], args.profile / f"n{nodes}") if args.profile else []
        counters = await pg_counters(info["database_dsn"])
        before = cpu_seconds(processes)
        try:
            result = await burst(
                info["nats_url"], requests_for(args.containers, args.request_size, f"n{nodes}"), args.within
            )
        finally:
            after = cpu_seconds(processes)
            stop_profiles(profilers)
        counted = await pg_counters(info["database_dsn"])
        await asyncio.sleep(1.0)
        size, rows = await database_mib(info["database_dsn"])
        jetstream = next((p for p in state.rglob("jetstream") if p.is_dir()), None)
        return {
            "nodes": nodes,
            "node_agents": agents,
            "register_seconds": round(registered, 1),
            **result,
            "cpu_seconds": {name: round(after[name] - before.get(name, 0.0), 2) for name in sorted(after)},
            "cpu_seconds_total": round(sum(after.values()) - sum(before.values()), 2),
            "idle_cpu_per_second": idle,
            "idle_cpu_per_second_total": round(sum(idle.values()), 3),
            "postgres_during_burst": {key: counted[key] - counters[key] for key in counted},
            "restarts_while_registering": restarts_before,
            "restarts_in_burst": _restarts_since(state, restarts_before),
            "memory_mib": memory_mib(processes),
            "postgres_mib": size,
            "container_rows": rows,
            "jetstream_mib": directory_mib(jetstream) if jetstream else None,
        }
    finally:
        eru("down", "--state-dir", str(state))
        if args.keep_logs:  # the services' logs of this run, for a look at what happened (restarts, errors)
            shutil.copytree(state / "logs", args.keep_logs / f"n{nodes}", dirs_exist_ok=True)


def _restarts_since(state: Path, before: dict[str, int]) -> dict[str, int]:
    """Processes the supervisor restarted since `before` (stack.json), with how many times."""
    now = json.loads((state / "stack.json").read_text()).get("restarts") or {}
    return {name: count - before.get(name, 0) for name, count in sorted(now.items()) if count > before.get(name, 0)}


async def main(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="eru-bench-scale-"))
    results = []
    try:
        for nodes in args.nodes:
            load = os.getloadavg()[0]
            figures = await one_scale(nodes, args, root)
            figures["load_before"] = round(load, 2)
            figures["load_after"] = round(os.getloadavg()[0], 2)
            results.append(figures)
            print(json.dumps(figures), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        json.dumps(
            {
                "bench": "scale",
                "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                "setup": {
                    "cores_per_node": 32,
                    "memory_per_node_gib": 64,
                    "containers": args.containers,
                    "request_size": args.request_size,
                    "replicas": args.replicas,
                    "metrics_interval_seconds": args.metrics_interval or 2,
                    "container": {"cpu_request": 0.25, "memory_request": "512MiB"},
                },
                "results": results,
            },
            indent=2,
        )
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=lambda t: [int(x) for x in t.split(",")], default=[100, 300, 1000, 5000])
    parser.add_argument("--containers", type=int, default=10_000)
    parser.add_argument("--request-size", type=int, default=100)
    parser.add_argument("--replicas", action="append", default=[], help="SERVICE=N, as `eru up --replicas`")
    parser.add_argument("--agents", type=int, default=1, help="sim node-agent processes sharing the nodes")
    parser.add_argument(
        "--metrics-interval", type=float, default=None, help="seconds between a sim node's metrics (eru up: 2)"
    )
    parser.add_argument("--register-within", type=float, default=600.0, help="seconds for the nodes to register")
    parser.add_argument("--idle-seconds", type=float, default=5.0, help="seconds of idle CPU measured before the burst")
    parser.add_argument("--within", type=float, default=900.0, help="seconds the burst may take")
    parser.add_argument("--profile", type=Path, default=None, help="directory for py-spy profiles of the burst")
    parser.add_argument("--keep-logs", type=Path, default=None, help="directory to copy each stack's logs into")
    return parser.parse_args()


if __name__ == "__main__":
    configure_logging("bench", "bench", log_format="json", level="warning")  # stdout stays one JSON document
    asyncio.run(main(parse_args()))
