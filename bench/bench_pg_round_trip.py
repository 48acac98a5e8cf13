"""What one PostgreSQL round trip costs over loopback TCP and over the Unix socket (docs/operations.md "PostgreSQL
over its Unix socket"): one asyncpg connection to an embedded server runs `SELECT $1::int` `--requests` times in a
row, per transport and round; CPU of this process (the client's side) and of the connection's backend, and wall
time, per round trip, in microseconds.

    python bench/bench_pg_round_trip.py [--requests 5000] [--rounds 3]

Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import psutil

from eru.testing.postgres_server import EmbeddedPostgres

WARM_UP = 200


async def round_trips(dsn: str, requests: int) -> dict[str, float]:
    """Microseconds per round trip: the client's CPU, the backend's CPU, wall time."""
    conn = await asyncpg.connect(dsn)
    try:
        backend = psutil.Process(await conn.fetchval("SELECT pg_backend_pid()"))
        for number in range(WARM_UP):
            await conn.fetchval("SELECT $1::int", number)
        client_before, backend_before, wall_before = time.process_time(), backend.cpu_times(), time.perf_counter()
        for number in range(requests):
            await conn.fetchval("SELECT $1::int", number)
        client_after, backend_after, wall_after = time.process_time(), backend.cpu_times(), time.perf_counter()
    finally:
        await conn.close()
    backend_seconds = (backend_after.user + backend_after.system) - (backend_before.user + backend_before.system)
    return {
        "client_cpu_us": round(1e6 * (client_after - client_before) / requests, 1),
        "backend_cpu_us": round(1e6 * backend_seconds / requests, 1),
        "wall_us": round(1e6 * (wall_after - wall_before) / requests, 1),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    """Both transports, interleaved round by round."""
    rounds: dict[str, list[dict[str, float]]] = {"tcp": [], "socket": []}
    with tempfile.TemporaryDirectory(prefix="eru-bench-pg-") as state:
        postgres = EmbeddedPostgres(Path(state) / "postgres")
        postgres.start()
        try:
            postgres.create_database("bench")
            dsns = {"tcp": postgres.dsn_for("bench"), "socket": postgres.socket_dsn_for("bench")}
            for _ in range(args.rounds):
                for transport, dsn in dsns.items():
                    rounds[transport].append(await round_trips(dsn, args.requests))
        finally:
            postgres.stop()
    medians = {
        transport: {key: sorted(r[key] for r in runs)[len(runs) // 2] for key in runs[0]}
        for transport, runs in rounds.items()
    }
    return {
        "benchmark": "pg_round_trip",
        "requests_per_round": args.requests,
        "rounds": rounds,
        "median": medians,
        "socket_to_tcp": {
            key: round(medians["socket"][key] / medians["tcp"][key], 2) for key in medians["tcp"] if medians["tcp"][key]
        },
    }


def main() -> None:
    """Parse arguments, run, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=5000, help="round trips per transport and round")
    parser.add_argument("--rounds", type=int, default=3)
    print(json.dumps(asyncio.run(main_async(parser.parse_args())), indent=2))


if __name__ == "__main__":
    main()
