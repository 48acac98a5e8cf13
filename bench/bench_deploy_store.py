"""The allocator's deploy batch path against a real PostgreSQL (docs/performance.md "The decision record"):
`commit_batch` over bursts of single-container requests with the allocator's own `PgStore` on an embedded, durable
PostgreSQL, the distributor's pure `place_batch` answering in process over the in-memory bus. No NATS, agent or
container events: what one burst costs the allocator's process and PostgreSQL's, per request, round after round on
one database (the containers of earlier rounds stay live, as in `bench_deploy.py --rounds 3`).

    python bench/bench_deploy_store.py [--nodes 16] [--requests 2000] [--batch 96] [--rounds 3]
        [--statements FILE]

Prints JSON: per round, ms of CPU per request of this process (the allocator's part) and of PostgreSQL's server
processes. `--statements FILE` adds the statements per batch and writes PostgreSQL's own statement counts of the
bursts (pg_stat_statements) to FILE as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg

from eru.bus import new_envelope
from eru.domain import DeployRequest
from eru.gc_tuning import collect_less
from eru.logging import configure_logging
from eru.planning import PlanningConfig
from eru.store import apply_migrations, create_pool
from eru.testing.memory_bus import InMemoryBus, serve_placement
from eru.testing.postgres_server import EmbeddedPostgres
from eru_allocator.deploy.context import Context
from eru_allocator.deploy.pipeline import commit_batch
from eru_allocator.deploy.requests import validate
from eru_allocator.store.postgres import PgStore

CONFIG = PlanningConfig()
NODE_SQL = """
INSERT INTO nodes (name, pod, cpu_map, memory, state)
VALUES ($1, 'bench', $2::jsonb, $3, 'up')
"""
# 1500 characters of each statement: the deploy batch's (store/submit_plan.py) opens with its node check, and its
# INSERTs begin about 1200 characters in
STATEMENTS_SQL = """
SELECT calls, rows, round(total_exec_time::numeric, 2) AS total_ms, round(mean_exec_time::numeric, 4) AS mean_ms,
       left(regexp_replace(query, '\\s+', ' ', 'g'), 1500) AS query
  FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%' ORDER BY total_exec_time DESC LIMIT 40
"""


def server_cpu_seconds(data_dir: Path) -> float:
    """User + system CPU seconds of the postmaster and its server processes (read from /proc)."""
    postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry.name), int(fields[1])
        if pid == postmaster or ppid == postmaster:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def requests_of(how_many: int, tag: str) -> list[Any]:
    """Single-container requests, ten workloads, as bench_deploy.py sends them."""
    items = []
    for index in range(how_many):
        req = DeployRequest.model_validate(
            {
                "request_id": f"{tag}-{index}",
                "pod": "bench",
                "count": 1,
                "mode": "auto",
                "workload": {
                    "name": f"{tag}-{index % 10}",
                    "image": "busybox",
                    "resources": {"cpu_bind": True, "cpu_request": 0.1, "memory_request": "16MiB"},
                },
            }
        )
        items.append((req, validate(req, CONFIG), new_envelope("eru.deploy.request", "bench")))
    return items


async def statement_calls(pool: asyncpg.Pool) -> int:
    """Statements PostgreSQL has executed since the last reset (pg_stat_statements)."""
    return int(await pool.fetchval("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements") or 0)


async def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """One database, `args.rounds` bursts."""
    # statement counts only when asked: an A/B's older side runs this script with its own packages
    counted = {"settings": {"shared_preload_libraries": "pg_stat_statements"}} if args.statements else {}
    postgres = EmbeddedPostgres(root / "pg", durable=True, **counted)
    postgres.start()
    try:
        dsn = postgres.dsn_for("postgres")
        pool = await create_pool(dsn, min_size=1, max_size=4)
        try:
            await apply_migrations(pool)
            if args.statements:
                await pool.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            await pool.execute("INSERT INTO pods (name) VALUES ('bench')")
            cores = json.dumps({str(c): 100 for c in range(64)})
            for index in range(args.nodes):
                await pool.execute(NODE_SQL, f"sim-{index:03d}", cores, 512 << 30)
            bus = InMemoryBus()
            serve_placement(bus)
            store = PgStore(pool)
            ctx = Context(store, bus, CONFIG, "allocator/bench", 5.0, 3600.0)
            # the last batch's unlock, sent after its answers; an A/B's older side has no such wait
            unlocked = getattr(store, "wait_unlocked", None)
            rounds = []
            if args.statements:
                await pool.execute("SELECT pg_stat_statements_reset()")
            for round_ in range(args.rounds):
                items = requests_of(args.requests, f"r{round_}")
                batches = -(-len(items) // args.batch)
                calls = await statement_calls(pool) if args.statements else 0
                server = server_cpu_seconds(postgres.data_dir)
                started, wall = time.process_time(), time.perf_counter()
                for start in range(0, len(items), args.batch):
                    answers = await commit_batch(ctx, "bench", items[start : start + args.batch])
                    assert all(hasattr(answer, "deploy_id") for answer in answers), answers[:3]
                if unlocked is not None:
                    await unlocked()
                cpu, wall = time.process_time() - started, time.perf_counter() - wall
                server = server_cpu_seconds(postgres.data_dir) - server
                figures = {
                    "allocator_ms_per_request": round(cpu * 1000 / len(items), 4),
                    "postgres_ms_per_request": round(server * 1000 / len(items), 4),
                    "wall_ms_per_request": round(wall * 1000 / len(items), 4),
                }
                if args.statements:  # less the count's own statement
                    figures["statements_per_batch"] = round((await statement_calls(pool) - calls - 1) / batches, 1)
                rounds.append(figures)
            if args.statements:
                rows = [dict(row) for row in await pool.fetch(STATEMENTS_SQL)]
                await asyncio.to_thread(Path(args.statements).write_text, json.dumps(rows, indent=1, default=float))
            return {"rounds": rounds}
        finally:
            await pool.close()
    finally:
        postgres.stop()


def main() -> None:
    """Parse arguments, run, print JSON."""
    configure_logging("bench", "bench", log_format="json", level="warning")
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=96, help="requests per batch (the stack's bursts form ~90)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--statements", default="", help="write pg_stat_statements of the bursts to FILE")
    args = parser.parse_args()
    collect_less()  # as every service does before it serves
    with tempfile.TemporaryDirectory(prefix="eru-bench-store-") as state:
        result = asyncio.run(run(args, Path(state)))
    setup = {"nodes": args.nodes, "requests": args.requests, "batch": args.batch, "postgres": "embedded, durable"}
    print(json.dumps({"benchmark": "allocator_deploy_path_on_postgres", "setup": setup, **result}))


if __name__ == "__main__":
    main()
