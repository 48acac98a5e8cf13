"""DRF admission in the running allocator: how fast a freed slot goes to the next waiting request, and the shares.

A real nats-server and PostgreSQL, the distributor and 1 or 2 allocator replicas in this process (the pipeline test
harness), a scripted node agent, one node of 9 cores / 18 GiB (the canonical pod of docs/fairness-and-scoring.md).
Tenants A (tasks {1 CPU, 4 GiB}) and B ({3 CPU, 1 GiB}) each queue `--backlog` one-task requests with a long
`wait_seconds`, A first; then `--rounds` times the oldest live task finishes (removed). Per round: the time from the
removal request to the pod being full again (the freed room planned for a waiting request, found by polling every 5 ms).
At the end: tasks per tenant against progressive filling's answer. Prints JSON.

Usage: python bench/bench_admission.py [--rounds 40] [--backlog 40] [--replicas 1,2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

from eru.domain.messages import RemoveRequest
from eru.domain.tenants import TenantCreateRequest
from eru.fairness import FillingTenant, Tenant, dominant_share, progressive_filling
from eru.logging import configure_logging
from eru.store import apply_migrations, create_pool
from eru.testing.nats_server import NatsServer
from eru.testing.postgres_server import EmbeddedPostgres

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration" / "pipeline"))
from pipeline_harness import GiB, Pipeline, ScriptedNodeAgent

TASKS = {"A": (1, 4), "B": (3, 1)}  # cores, GiB
LIVE_SQL = (
    "SELECT id, tenant FROM containers WHERE state NOT IN ('removed', 'failed', 'stopping') ORDER BY created_at, id"
)
BUSY_SQL = "SELECT count(*) FROM containers WHERE state IN ('planned', 'creating', 'stopping')"


async def settle(pipe: Pipeline, live: int | None) -> None:
    while True:
        if not await pipe.pool.fetchval(BUSY_SQL):
            rows = await pipe.pool.fetch(LIVE_SQL)
            if live is None or len(rows) == live:
                return
        await asyncio.sleep(0.005)


def tasks(rows: list[Any]) -> dict[str, int]:
    return {name: sum(1 for row in rows if row["tenant"] == name) for name in TASKS}


async def scenario(nats_url: str, dsn: str, replicas: int, args: argparse.Namespace) -> dict[str, Any]:
    pipe = Pipeline(nats_url, dsn)
    await pipe.start(replicas=replicas)
    agent = ScriptedNodeAgent(pipe.nc)
    await agent.start()
    try:
        await pipe.register("n1", cores=9, memory=18 * GiB)
        for name, (cpu, memory) in TASKS.items():
            await pipe.op("tenant-create", TenantCreateRequest(name=name))
            for index in range(args.backlog):
                workload = {
                    "name": f"{name}{index}",
                    "image": "busybox",
                    "tenant": name,
                    "resources": {"cpu_bind": True, "cpu_request": cpu, "memory_request": memory * GiB},
                }
                await pipe.deploy(workload=workload, wait_seconds=3600)
            await settle(pipe, None)
        start = tasks(await pipe.pool.fetch(LIVE_SQL))
        seconds = []
        for _ in range(args.rounds):
            live = list(await pipe.pool.fetch(LIVE_SQL))
            began = time.perf_counter()
            await pipe.op("remove", RemoveRequest(container_ids=[live[0]["id"]]))
            await settle(pipe, len(live))
            seconds.append(time.perf_counter() - began)
        end = tasks(await pipe.pool.fetch(LIVE_SQL))
        decisions = await pipe.pool.fetchval("SELECT count(*) FROM decisions WHERE kind = 'admission'")
    finally:
        await agent.stop()
        await pipe.close()
    totals = {"cpu": Fraction(9), "memory": Fraction(18 * GiB)}
    per_task = {name: {"cpu": Fraction(cpu), "memory": Fraction(memory * GiB)} for name, (cpu, memory) in TASKS.items()}
    drf = progressive_filling(totals, [FillingTenant(Tenant(name), per_task[name]) for name in TASKS]).tasks
    shares = {
        name: float(dominant_share({r: a * end[name] for r, a in per_task[name].items()}, totals)) for name in TASKS
    }
    ordered = sorted(seconds)
    return {
        "replicas": replicas,
        "rounds": args.rounds,
        "tasks_at_start": start,
        "tasks_at_end": end,
        "drf_tasks": drf,
        "dominant_shares_at_end": {name: round(share, 3) for name, share in shares.items()},
        "admission_decisions": decisions,
        "freed_to_refilled_ms": {
            "p50": round(statistics.median(ordered) * 1000, 1),
            "p90": round(ordered[int(0.9 * (len(ordered) - 1))] * 1000, 1),
            "max": round(ordered[-1] * 1000, 1),
        },
    }


async def main_async(args: argparse.Namespace) -> None:
    configure_logging("bench", "bench", log_format="json", level="warning")
    results = []
    with tempfile.TemporaryDirectory(prefix="eru-bench-admission-") as tmp:
        root = Path(tmp)
        postgres = EmbeddedPostgres(root / "postgres")
        postgres.start()
        try:
            for replicas in (int(r) for r in args.replicas.split(",")):
                database = f"eru_r{replicas}"
                postgres.create_database(database)
                dsn = postgres.dsn_for(database)
                pool = await create_pool(dsn, min_size=1, max_size=2)
                await apply_migrations(pool)
                await pool.close()
                nats = NatsServer(store_dir=root / f"nats-{replicas}")  # fresh streams per scenario
                nats.start()
                try:
                    results.append(await scenario(nats.url, dsn, replicas, args))
                finally:
                    nats.stop()
        finally:
            postgres.stop()
    print(json.dumps({"machine": platform.machine(), "cpus": _cpus(), "results": results}, indent=2))


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


def main() -> None:
    """Parse the options and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--backlog", type=int, default=40)
    parser.add_argument("--replicas", default="1,2")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
