"""Deploy throughput end to end on sim nodes: request published → terminal event, through the real services.

A real nats-server, a real PostgreSQL (durable, as `eru up` runs it), the distributor, 1 or 3 allocator replicas and
the sim node agent as processes. For each replica count and each request size (1 container, 100 containers) it
sends a burst of requests at once and measures, per request, the time from publishing it to its terminal event,
and overall the containers per second (placed, committed and started: every container's `started` event is in).
In the same run it measures this machine's raw nats-py request/reply rate (an echo responder) as the ceiling.
Sim nodes have 64 cores, or more when every round's containers would not fit (`--cores-per-node`): the bench never
removes what it deployed, and a round refused for lack of capacity would count as fast.

Usage: python bench/bench_deploy.py [--nodes 40] [--small 600] [--large 40] [--rounds 1] [--replicas 1,3] [--pods 1]
[--steady-rate 300 --steady-seconds 10]. Prints JSON. `--small 0` or `--large 0` leaves that burst out.

Every request carries `Eru-Reply-To`, so a request counts as done once it is answered and its deploy ended (a
refused one once answered). With `--steady-rate`, each round ends with an open-loop client sending single-container
requests at that rate (each at its time, whatever the answers do): p50/p99 of publish → reply and publish →
completed (`steady`).
With `--pods 4` the nodes and requests are spread over four pods, whose allocation locks are independent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg

from eru.bus import connect
from eru.bus.streams import provision_streams
from eru.logging import configure_logging
from eru.settings import Settings
from eru.store import apply_migrations, create_pool
from eru.store.retention import collect
from eru.testing.nats_server import NatsServer
from eru.testing.postgres_server import EmbeddedPostgres

sys.path.insert(0, str(Path(__file__).resolve().parent))
# bench/ is not a package: the client's load and the stack's processes live beside this script
from deploy_load import burst, pod_name, raw_request_reply, requests_of, steady
from deploy_stack import cpu_by_part, measured, start, stop


async def split_pods(nats_url: str, pods: int, nodes: list[str]) -> None:
    """Move the registered nodes into `pods` pods, in turn (SetNode with a new pod; they hold no container yet)."""
    from eru.bus import request
    from eru.bus.subjects import allocator_operation
    from eru.domain.messages import OperationReply, SetNodeRequest

    nc = await connect(nats_url, name="bench-pods")
    try:
        for index, node in enumerate(nodes):
            move = SetNodeRequest(node=node, pod=pod_name(index, pods))
            await request(nc, allocator_operation("set-node"), move, OperationReply, 10)
    finally:
        await nc.close()


async def scenario(nats_url: str, dsn: str, replicas: int, args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    """One replica count: fresh database content, services up, the two bursts."""
    pool = await create_pool(dsn, min_size=1, max_size=2)
    await pool.execute("TRUNCATE containers, deploys, decisions, outbox, inbox, nodes, pods CASCADE")
    nc = await connect(nats_url, name="bench-setup")
    js = nc.jetstream()
    for stream in ("ERU_DEPLOY", "ERU_NODE", "ERU_EVENTS"):
        await js.purge_stream(stream)
    await nc.close()
    env = {
        "ERU_BUS__URL": nats_url,
        "ERU_STORE__DSN": dsn,
        "ERU_LOG_LEVEL": os.environ.get("ERU_BENCH_LOG_LEVEL", "warning"),  # debug: per-batch timings in the logs
        "ERU_LOG_FORMAT": "json",
        "ERU_STORE__POOL_MAX": "12",
    }
    processes = [start("eru_distributor", {**env, "ERU_REPLICA": "d1"}, logs / "distributor.log")]
    processes += [
        start("eru_allocator", {**env, "ERU_REPLICA": f"a{i}"}, logs / f"allocator-{i}.log") for i in range(replicas)
    ]
    processes.append(
        start(
            "eru_node_agent",
            {
                **env,
                "ERU_REPLICA": "sim",
                "ERU_NODE_AGENT__RUNTIME": "sim",
                "ERU_NODE_AGENT__NODE": "sim",
                "ERU_NODE_AGENT__POD": "bench",
                "ERU_NODE_AGENT__SIM_NODES": str(args.nodes),
                "ERU_NODE_AGENT__CPU_CORES": str(args.cores_per_node),
                "ERU_NODE_AGENT__MEMORY": str(512 * 1024**3),
                "ERU_NODE_AGENT__METRICS_INTERVAL_SECONDS": "60",
                "ERU_NODE_AGENT__MAX_CONCURRENT_COMMANDS": "32",
            },
            logs / "node-agent.log",
        )
    )
    try:
        deadline = time.monotonic() + 90
        while await pool.fetchval("SELECT count(*) FROM nodes") < args.nodes:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nodes did not register; see {logs}")
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)  # consumers of every service are up
        await partitions_in_place(dsn)
        if args.pods > 1:
            names = [row["name"] for row in await pool.fetch("SELECT name FROM nodes ORDER BY name")]
            await split_pods(nats_url, args.pods, names)
        idle: dict[str, float] = {}
        if args.idle_seconds > 0:  # what the stack costs doing nothing (every replica's polls, sweeps and relays)
            before = cpu_by_part()
            await asyncio.sleep(args.idle_seconds)
            after = cpu_by_part()
            idle = {key: round(100 * (after[key] - before.get(key, 0.0)) / args.idle_seconds, 2) for key in after}
        smalls, larges, steadies = [], [], []
        if args.pg_statements:
            await pool.execute("SELECT pg_stat_statements_reset()")  # the bursts' statements only
        for round_ in range(args.rounds):
            tag = f"r{replicas}-{round_}"
            if args.small:
                small_requests = requests_of(1, args.small, f"{tag}s", args.pods)
                smalls.append(await measured(burst(nats_url, small_requests, 300), args.small, nats_url))
            if args.large:
                large_requests = requests_of(100, args.large, f"{tag}l", args.pods)
                larges.append(await measured(burst(nats_url, large_requests, 300), 100 * args.large, nats_url))
            if args.steady_rate > 0:
                requests = round(args.steady_rate * args.steady_seconds)
                tap_to = Path(f"{args.tap}.{replicas}.{round_}") if args.tap else None
                work = steady(nats_url, args.steady_rate, args.steady_seconds, f"{tag}r", args.pods, 300, tap_to)
                steadies.append(await measured(work, requests))
        if args.pg_statements:
            await write_statements(pool, Path(f"{args.pg_statements}.{replicas}"))
    finally:
        stop(processes)
        await pool.close()
    result: dict[str, Any] = {"replicas": replicas}
    if idle:
        result["idle_cpu_percent"] = dict(sorted(idle.items()))
    if smalls:
        result["requests_of_1"] = median_round(smalls)
    if larges:
        result["requests_of_100"] = median_round(larges)
    if steadies:
        ordered = sorted(steadies, key=lambda r: float(r["completed_p99_ms"]))
        result["steady"] = {
            **ordered[(len(ordered) - 1) // 2],
            "rounds_completed_p99_ms": [r["completed_p99_ms"] for r in steadies],
        }
    return result


STATEMENTS_SQL = """
SELECT calls, rows, round(total_exec_time::numeric, 2) AS total_ms, round(mean_exec_time::numeric, 4) AS mean_ms,
       left(regexp_replace(query, '\\s+', ' ', 'g'), 300) AS query
  FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 40
"""


async def write_statements(pool: asyncpg.Pool, path: Path) -> None:
    """PostgreSQL's own count of the bursts' statements (pg_stat_statements: calls, rows, execution time), the
    costliest first, as JSON in `path` (not stdout, which carries only the figures)."""
    rows = [dict(row) for row in await pool.fetch(STATEMENTS_SQL)]
    await asyncio.to_thread(path.write_text, json.dumps(rows, indent=1, default=float))


async def partitions_in_place(dsn: str) -> None:
    """One retention pass done before the bursts. On a fresh database the first pass creates a week of partitions,
    each under an ACCESS EXCLUSIVE lock of its parent (decisions, deploys_history, …), and the allocator's first
    pass comes seconds after it starts: during the first burst, whose inserts then waited behind those locks
    (45–120 ms each, up to 11 per table). Here the bench runs the pass itself (or waits while the allocator's runs),
    so every round measures the deploy path alone."""
    retention = Settings.model_fields["retention_seconds"].default  # the services run with the default
    # a pool of its own, as large as a service's: an older `collect` (an A/B's before side) held one connection and
    # waited for another
    pool = await create_pool(dsn, min_size=1, max_size=4)
    try:
        for _ in range(300):
            if (await asyncio.wait_for(collect(pool, retention), 60)).ran:
                return
            await asyncio.sleep(0.2)  # the allocator's pass holds the lock: the next try finds the partitions made
    finally:
        await pool.close()
    raise RuntimeError("no retention pass could run within 60 s")


def median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round of median throughput, with every round's containers per second beside it (a shared machine's
    drift shows as their spread)."""
    ordered = sorted(rounds, key=lambda r: float(r["containers_per_second"]))
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["rounds_containers_per_second"] = [r["containers_per_second"] for r in rounds]
    return chosen


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="eru-bench-deploy-") as state:
        root = Path(state)
        nats = NatsServer(store_dir=root / "nats")
        nats.start()
        # settings only when asked: an A/B's older side (bench/ab_deploy.sh) runs this script with its own packages
        statements = {"settings": {"shared_preload_libraries": "pg_stat_statements"}} if args.pg_statements else {}
        postgres = EmbeddedPostgres(root / "postgres", durable=True, **statements)
        postgres.start()
        try:
            postgres.create_database("eru")
            # as `eru up` gives its services: the Unix socket (docs/operations.md); `--postgres-over tcp`: loopback
            dsn = postgres.socket_dsn_for("eru") if args.postgres_over == "socket" else postgres.dsn_for("eru")
            pool = await create_pool(dsn, min_size=1, max_size=2)
            await apply_migrations(pool)
            if args.pg_statements:
                await pool.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            await pool.close()
            setup = await connect(nats.url, name="bench-provision")
            await provision_streams(setup.jetstream())
            await setup.close()
            ceiling = await raw_request_reply(nats.url)
            results = []
            for replicas in args.replicas:
                logs = Path(os.environ.get("ERU_BENCH_KEEP_LOGS") or root) / f"logs-{replicas}"
                logs.mkdir(parents=True, exist_ok=True)
                results.append(await scenario(nats.url, dsn, replicas, args, logs))
        finally:
            postgres.stop()
            nats.stop()
    for result in results:
        for key in ("requests_of_1", "requests_of_100"):
            if key in result:
                result[key]["ratio_to_raw_request_reply"] = round(result[key]["containers_per_second"] / ceiling, 3)
    return {
        "benchmark": "deploy_end_to_end",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "setup": {
            "sim_nodes": args.nodes,
            "pods": args.pods,
            "cores_per_node": args.cores_per_node,
            "postgres": "embedded, durable",
        },
        "raw_nats_request_reply_per_second": round(ceiling, 1),
        "goals": {
            "requests_of_1_containers_per_second": 1000,
            "requests_of_100_containers_per_second": 5000,
            "steady_completed_p99_ms": 100,
        },
        "results": results,
    }


def main() -> None:
    """Parse arguments, run, print JSON (logs go to stderr, warnings only)."""
    configure_logging("bench", "bench", log_format="json", level="warning")
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=40)
    parser.add_argument("--small", type=int, default=600, help="requests of 1 container")
    parser.add_argument(
        "--large", type=int, default=40, help="requests of 100 containers (a burst long enough for a steady pipeline)"
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="bursts of each size per stack; the median round is reported (≤ 5)"
    )
    parser.add_argument(
        "--steady-rate", type=float, default=0.0, help="then single-container requests at this rate, open loop"
    )
    parser.add_argument("--steady-seconds", type=float, default=10.0, help="for this long")
    parser.add_argument(
        "--tap", default="", help="write every message of the steady run to TAP.<replicas>.<round> (trace_deploys.py)"
    )
    parser.add_argument("--pods", type=int, default=1, help="split the nodes (and requests) over this many pods")
    parser.add_argument("--replicas", type=lambda text: [int(x) for x in text.split(",")], default=[1, 3])
    parser.add_argument(
        "--idle-seconds", type=float, default=0.0, help="first measure the idle stack's CPU for this long (percent)"
    )
    parser.add_argument(
        "--cores-per-node",
        type=int,
        default=0,
        help="cores of each sim node (default: 64, or more when every round's containers would not fit)",
    )
    parser.add_argument(
        "--postgres-over",
        choices=("socket", "tcp"),
        default="socket",
        help="how the services reach PostgreSQL: its Unix socket (as eru up) or loopback TCP",
    )
    parser.add_argument(
        "--pg-statements",
        default="",
        help="write PostgreSQL's statement counts of the bursts (pg_stat_statements) to FILE.<replicas> as JSON",
    )
    args = parser.parse_args()
    if args.cores_per_node <= 0:
        args.cores_per_node = cores_for_rounds(args)
    print(json.dumps(asyncio.run(main_async(args)), indent=2))


def cores_for_rounds(args: argparse.Namespace) -> int:
    """Cores per sim node so that every round's containers fit together (the bench never removes them): each takes
    0.1 core (10 pieces); a quarter spare so that no round is refused for capacity. At least 64."""
    steady = round(args.steady_rate * args.steady_seconds) if args.steady_rate else 0
    per_round = args.small + 100 * args.large + steady
    cores = 0.1 * per_round * args.rounds * 1.25 / max(1, args.nodes)
    return max(64, 16 * -(-int(cores) // 16))


if __name__ == "__main__":
    main()
