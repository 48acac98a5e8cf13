"""A cell end to end, at several sizes in one run (docs/performance.md "A cell, end to end"), in the manner of
Kubernetes' scheduler_perf: for each N of `--nodes` a fresh `eru up` with N sim nodes of 32 cores and 64 GiB, timed
until every node is registered and has sent a heartbeat; then, after the cell has settled (`--settle-seconds`: the
agents' start wave of inventories, first samples and conditions, its CPU reported as `settle_cpu_per_second`) and an
idle phase, `--containers` containers (requests of 100, each 0.1
core and 64 MiB) sent at once by an independent client process (bench/cell_client.py: plain nats-py, as a user's
program would), waited for until every request is answered, every deploy ended and every container running; then
the ledger's allocation invariant (bench.faults.checks) and the container counts are checked, the stack is left
running with its containers for `--steady-seconds` (the eviction service's lag with N loaded nodes), and stopped.

Per N: containers/s, CPU seconds of every process (psutil; the client's own), RSS of the allocator and nats-server,
PostgreSQL's pg_database_size, the decision records' bytes per deploy batch, JetStream's messages and bytes per
stream, and the eviction lag per phase (bench/cell_lag.py). Over the run: throughput(largest N) / throughput(first
N), and a CPU-speed probe (docs/performance.md "The machine") before and after, so that days can be compared.

Usage: python -m bench.bench_cell [--nodes 100,1000,5000] [--containers 50000 | --quick] [--agents 2]
Prints one JSON document on stdout; progress bars and one JSON line per N on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import psutil
from bench.bench_scale import cpu_seconds, eru, memory_mib
from bench.cell_client import Progress
from bench.cell_lag import LagMonitor
from bench.faults.checks import invariant_violations

from eru.bus import connect
from eru.logging import configure_logging
from eru.testing.nats_server import free_port

CLIENT = Path(__file__).resolve().parent / "cell_client.py"
INVENTORY_SECONDS = 30.0  # the agents' inventory period (ERU_INVENTORY_SECONDS), which `eru up` leaves at its default
HEALTHY_SQL = (
    "SELECT count(*) FROM nodes n JOIN node_status s USING (name) WHERE n.state = 'up' AND s.heartbeat_at IS NOT NULL"
)
LEDGER_SQL = """
SELECT (SELECT count(*) FROM containers WHERE deploy_id = ANY($1::text[])) AS rows,
       (SELECT count(*) FROM containers WHERE deploy_id = ANY($1::text[]) AND state = 'running') AS running,
       (SELECT count(DISTINCT node) FROM containers WHERE deploy_id = ANY($1::text[])) AS nodes_used
"""
DECISIONS_SQL = """
SELECT (SELECT count(*) FROM decision_snapshots) AS batches,
       (SELECT coalesce(sum(octet_length(nodes)), 0) FROM decision_snapshots) AS snapshot_bytes,
       (SELECT count(*) FROM decisions WHERE kind = 'deploy') AS records,
       (SELECT coalesce(sum(octet_length(input) + coalesce(octet_length(output::text), 0)), 0)
          FROM decisions WHERE kind = 'deploy') AS record_bytes,
       pg_database_size(current_database()) AS database_bytes
"""
TABLES_SQL = """
SELECT relname, n_live_tup, pg_total_relation_size(relid) AS bytes FROM pg_stat_user_tables
 WHERE pg_total_relation_size(relid) > 1048576 ORDER BY bytes DESC
"""


def cpu_probe() -> float:
    """Seconds of a fixed pure-Python loop (docs/performance.md "The machine"): which day it is."""
    started = time.perf_counter()
    total = 0
    for i in range(10**7):
        total += i
    return round(time.perf_counter() - started, 2)


async def wait_healthy(dsn: str, nodes: int, within: float) -> float:
    """Seconds until `nodes` nodes are registered, up and have sent a heartbeat (a progress bar meanwhile)."""
    started = time.perf_counter()
    progress = Progress(f"{nodes} nodes healthy", nodes)
    conn = await asyncpg.connect(dsn)
    try:
        while (healthy := await conn.fetchval(HEALTHY_SQL)) < nodes:
            progress.show(healthy)
            if time.perf_counter() - started > within:
                raise RuntimeError(f"only {healthy} of {nodes} nodes registered and healthy within {within} s")
            await asyncio.sleep(0.5)
        progress.show(healthy)
    finally:
        progress.close()
        await conn.close()
    return time.perf_counter() - started


async def streams(js: Any) -> dict[str, tuple[int, int]]:
    """Messages and bytes of every JetStream stream."""
    return {s.config.name: (s.state.messages, s.state.bytes) for s in await js.streams_info()}


async def event_kinds(js: Any) -> dict[str, int]:
    """ERU_EVENTS' messages per kind of subject, the node token left out (`eru.node.*.condition`: 4,212)."""
    info = await js.stream_info("ERU_EVENTS", subjects_filter="eru.>")
    kinds: dict[str, int] = {}
    for subject, count in (info.state.subjects or {}).items():
        tokens = subject.split(".")
        if len(tokens) > 2:
            tokens[2] = "*"
        kind = ".".join(tokens)
        kinds[kind] = kinds.get(kind, 0) + count
    return kinds


async def wait_running(dsn: str, deploy_ids: list[str], containers: int, within: float) -> dict[str, int]:
    """The ledger's rows of the run's deploys once every container is running (or `within` has passed)."""
    started = time.perf_counter()
    conn = await asyncpg.connect(dsn)
    try:
        while True:
            record = await conn.fetchrow(LEDGER_SQL, deploy_ids)
            row = dict(record) if record is not None else {}
            if row["running"] >= containers or time.perf_counter() - started > within:
                return {key: int(value) for key, value in row.items()}
            await asyncio.sleep(1.0)
    finally:
        await conn.close()


async def database_figures(dsn: str) -> dict[str, Any]:
    """The decision records per batch, the database's size and its tables over 1 MiB."""
    conn = await asyncpg.connect(dsn)
    try:
        record = await conn.fetchrow(DECISIONS_SQL)
        row = dict(record) if record is not None else {}
        tables = {
            r["relname"]: {"rows": r["n_live_tup"], "mib": round(r["bytes"] / 1024**2, 1)}
            for r in await conn.fetch(TABLES_SQL)
        }
    finally:
        await conn.close()
    batches = max(1, int(row["batches"]))
    return {
        "database_mib": round(row["database_bytes"] / 1024**2, 1),
        "deploy_batches": int(row["batches"]),
        "decision_records": int(row["records"]),
        "decision_bytes_per_batch": round((row["snapshot_bytes"] + row["record_bytes"]) / batches),
        "snapshot_bytes_per_batch": round(row["snapshot_bytes"] / batches),
        "tables": tables,
    }


def run_client(url: str, args: argparse.Namespace, tag: str) -> tuple[subprocess.Popen[str], Any]:
    """Start the independent client (its own process; progress on this stderr)."""
    command = [sys.executable, str(CLIENT), "--url", url, "--containers", str(args.containers)]
    command += ["--request-size", str(args.request_size), "--tag", tag, "--within", str(args.within)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    return process, psutil.Process(process.pid)


async def one_cell(nodes: int, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """A fresh stack of `nodes` sim nodes, the burst, the checks, the steady phase, the figures; the stack stopped."""
    state = root / f"n{nodes}"
    agents = max(1, min(args.agents, nodes))
    room = capacity(nodes)
    if args.containers > room:
        print(f"{nodes} nodes hold {room} containers of 0.1 core: {args.containers} cannot all run", file=sys.stderr)
    up = ["up", "--state-dir", str(state), "--detach", "--no-console", "--sim-nodes", str(nodes)]
    up += ["--nats-port", str(free_port()), "--postgres-port", str(free_port())]
    up += ["--sim-node-cpus", "32", "--sim-node-memory", "64GiB", "--replicas", f"node-agent={agents}"]
    started = eru(*up)
    if started.returncode != 0:
        raise RuntimeError(f"eru up failed: {started.stdout}{started.stderr}")
    idle_seconds = args.idle_seconds or max(10.0, _metrics_interval(nodes))
    settle_seconds = _settle_seconds(nodes) if args.settle_seconds is None else args.settle_seconds
    steady_seconds = args.steady_seconds or max(20.0, 2 * _metrics_interval(nodes))
    try:
        info = json.loads((state / "stack.json").read_text())
        dsn = info["database_dsn"]
        healthy = await wait_healthy(dsn, nodes, args.register_within)
        info = json.loads((state / "stack.json").read_text())  # a restarted process has a new pid
        processes = {**info["processes"], **info["server_pids"]}
        nc = await connect(info["nats_url"], name="bench-cell")
        js = nc.jetstream()
        lag = LagMonitor(nc, f"n{nodes}")
        await lag.start()
        try:
            lag.phase("settle")
            settle_before = cpu_seconds(processes)
            await asyncio.sleep(settle_seconds)
            settle = _rates(settle_before, cpu_seconds(processes), settle_seconds) if settle_seconds > 0 else {}
            lag.phase("idle")
            idle_before, idle_streams = cpu_seconds(processes), await streams(js)
            idle_kinds = await event_kinds(js)
            await asyncio.sleep(idle_seconds)
            idle = _rates(idle_before, cpu_seconds(processes), idle_seconds)
            idle_messages = _stream_delta(idle_streams, await streams(js))
            idle_kinds = {k: n - idle_kinds.get(k, 0) for k, n in (await event_kinds(js)).items()}
            lag.phase("burst")
            before, streams_before = cpu_seconds(processes), await streams(js)
            kinds_before = await event_kinds(js)
            client, watched = run_client(info["nats_url"], args, f"n{nodes}")
            client_cpu = 0.0
            while client.poll() is None:  # the client's CPU, read until it exits
                times = watched.cpu_times()
                client_cpu = times.user + times.system
                await asyncio.sleep(0.5)
            stdout, _ = client.communicate()
            after = cpu_seconds(processes)
            burst_streams = _stream_delta(streams_before, await streams(js))
            kinds_after = await event_kinds(js)
            burst_kinds = {k: n - kinds_before.get(k, 0) for k, n in sorted(kinds_after.items())}
            result = json.loads(stdout)
            deploy_ids = result.pop("deploy_ids")
            ledger = await wait_running(dsn, deploy_ids, args.containers, args.start_within)
            violations = await invariant_violations(dsn)
            lag.phase("steady")
            steady_before = cpu_seconds(processes)
            await asyncio.sleep(steady_seconds)
            steady = _rates(steady_before, cpu_seconds(processes), steady_seconds)
        finally:
            await lag.stop()
            await nc.close()
        burst_cpu = {name: round(after[name] - before.get(name, 0.0), 2) for name in sorted(after)}
        burst_cpu["client"] = round(max(client_cpu, result.get("client_cpu_seconds", 0.0)), 2)
        memory = memory_mib(processes)
        return {
            "nodes": nodes,
            "capacity_containers": room,
            "node_agents": agents,
            "healthy_seconds": round(healthy, 1),
            **result,
            "complete": result["answered"] == result["requests"] and ledger["running"] == args.containers,
            "ledger": ledger,
            "invariant_violations": violations[:10],
            "invariant_holds": not violations,
            "cpu_seconds": burst_cpu,
            "cpu_seconds_total": round(sum(burst_cpu.values()), 2),
            "cpu_ms_per_container": round(1000 * sum(burst_cpu.values()) / args.containers, 3),
            "settle_seconds": settle_seconds,
            "settle_cpu_per_second": settle,
            "idle_cpu_per_second": idle,
            "idle_stream_messages_per_second": {k: round(v[0] / idle_seconds, 1) for k, v in idle_messages.items()},
            "steady_cpu_per_second": steady,
            "burst_stream_messages": {k: {"messages": v[0], "bytes": v[1]} for k, v in burst_streams.items()},
            "idle_event_subjects": {k: n for k, n in sorted(idle_kinds.items()) if n},
            "burst_event_subjects": {k: n for k, n in burst_kinds.items() if n},
            "memory_mib": memory,
            "allocator_rss_mib": memory.get("allocator"),
            "nats_server_rss_mib": memory.get("nats-server"),
            **await database_figures(dsn),
            "eviction_lag": lag.report(),
            "metrics_interval_seconds": _metrics_interval(nodes),
        }
    finally:
        eru("down", "--state-dir", str(state))
        if args.keep_logs:
            shutil.copytree(state / "logs", args.keep_logs / f"n{nodes}", dirs_exist_ok=True)


def capacity(nodes: int) -> int:
    """Containers of 0.1 core and 64 MiB that `nodes` nodes of 32 cores and 64 GiB hold: 320 a node (cores bind)."""
    return nodes * min(32 * 10, 64 * 1024 // 64)


def _settle_seconds(nodes: int) -> float:
    """How long a fresh cell's start wave lasts: every agent sends each periodic inventory while it settles (the
    longer of `INVENTORY_SETTLE_SECONDS` and two periods of the default 30 s, docs/node-agent.md "Idle cost"), and
    every node's first sample brings its first condition within a metrics interval."""
    from eru.nodeagent.metrics import INVENTORY_SETTLE_SECONDS

    return max(INVENTORY_SETTLE_SECONDS, 2 * INVENTORY_SECONDS) + _metrics_interval(nodes)


def _metrics_interval(nodes: int) -> float:
    """The sim nodes' metrics interval under `eru up` (eru.stack.launch.sim_metrics_interval)."""
    from eru.stack.launch import sim_metrics_interval

    return sim_metrics_interval(nodes)


def _rates(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    return {name: round((after[name] - before.get(name, 0.0)) / seconds, 3) for name in sorted(after)}


def _stream_delta(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    return {
        name: (messages - before.get(name, (0, 0))[0], size - before.get(name, (0, 0))[1])
        for name, (messages, size) in sorted(after.items())
        if messages != before.get(name, (0, 0))[0]
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="eru-bench-cell-"))
    probe_before = cpu_probe()
    results = []
    try:
        for nodes in args.nodes:
            load = os.getloadavg()[0]
            figures = await one_cell(nodes, args, root)
            figures["load_before"], figures["load_after"] = round(load, 2), round(os.getloadavg()[0], 2)
            results.append(figures)
            print(json.dumps(figures), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    first, last = results[0], results[-1]
    ratio = (
        round(last["containers_per_second"] / first["containers_per_second"], 3)
        if first.get("containers_per_second") and last.get("containers_per_second")
        else None
    )
    return {
        "bench": "cell",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "memory_gib": _memory_gib()},
        "cpu_probe_seconds": {"before": probe_before, "after": cpu_probe()},
        "setup": {
            "cores_per_node": 32,
            "memory_per_node_gib": 64,
            "containers": args.containers,
            "request_size": args.request_size,
            "container": {"cpu_request": 0.1, "memory_request": "64MiB"},
            "node_agents": args.agents,
        },
        "complete": all(r["complete"] and r["invariant_holds"] for r in results),
        "throughput_ratio_largest_to_first": ratio,
        "results": results,
    }


def _memory_gib() -> float:
    return round(psutil.virtual_memory().total / 1024**3, 1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=lambda t: [int(x) for x in t.split(",")], default=[100, 1000, 5000])
    parser.add_argument("--containers", type=int, default=None, help="containers per N (default 50,000)")
    parser.add_argument("--quick", action="store_true", help="10,000 containers (unless --containers)")
    parser.add_argument("--request-size", type=int, default=100)
    parser.add_argument("--agents", type=int, default=2, help="sim node-agent processes sharing the nodes")
    parser.add_argument("--register-within", type=float, default=600.0)
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=None,
        help="wait after registration before the idle phase (default: the agents' start wave, 62 s at 100 nodes)",
    )
    parser.add_argument(
        "--idle-seconds", type=float, default=None, help="idle phase (default 1 metrics interval, ≥ 10 s)"
    )
    parser.add_argument(
        "--steady-seconds", type=float, default=None, help="loaded phase after the burst (default 2 intervals, ≥ 20 s)"
    )
    parser.add_argument("--within", type=float, default=1800.0, help="seconds the client may wait")
    parser.add_argument("--start-within", type=float, default=300.0, help="seconds for every container to run after")
    parser.add_argument("--keep-logs", type=Path, default=None, help="directory to copy each stack's logs into")
    args = parser.parse_args(argv)
    if args.containers is None:
        args.containers = 10_000 if args.quick else 50_000
    return args


if __name__ == "__main__":
    configure_logging("bench", "bench", log_format="json", level="warning")  # stdout stays one JSON document
    print(json.dumps(asyncio.run(main(parse_args())), indent=2))
