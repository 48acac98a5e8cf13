"""How long the allocator takes to apply one batch of container events (docs/store.md "Container events in two
statements"), on the embedded PostgreSQL (durable), without NATS: the transaction that stands between a node agent's
`started` report and the deploy's `completed` event.

Single-container deploys on 16 nodes; each batch holds `--messages` node messages of `--events` `started` events
(the steady 300/s run's batches hold ~10–30). Batches are applied one after another, as the allocator's event batcher
does. Prints JSON: per-batch wall time (median, p90, p99), events per second, the process's CPU per event, and the
statements each batch sent (asyncpg's query logger: BEGIN and COMMIT included, the pool's reset too).

    python bench/bench_event_batch.py [--batches 200] [--messages 16] [--events 2]

For before/after on a shared machine, run two checkouts alternately with PYTHONPATH (bench/ab_deploy.sh's pattern).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg

from eru.bus import new_envelope
from eru.domain import ContainerEvent
from eru.logging import configure_logging
from eru.store import apply_migrations, create_pool
from eru.testing.postgres_server import EmbeddedPostgres
from eru_allocator.events import EventContext, apply_events

NODES = [f"n{i:02d}" for i in range(16)]
ALLOCATION = json.dumps({"cpu_map": {"0": 10}, "memory": 1 << 20})


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _fill(pool: asyncpg.Pool, deploys: int) -> None:
    await pool.execute("INSERT INTO pods (name) VALUES ('p1')")
    await pool.executemany(
        "INSERT INTO nodes (name, pod, cpu_map, memory) VALUES ($1, 'p1', '{\"0\": 100000}', 1099511627776)",
        [(node,) for node in NODES],
    )
    ids = [f"d{index:06d}" for index in range(deploys)]
    await pool.execute(
        """INSERT INTO deploys (id, request_id, pod, tenant, status, request, result)
           SELECT id, id, 'p1', 'default', 'planned', '{}', jsonb_build_object('placements', '{}'::jsonb)
             FROM unnest($1::text[]) AS id""",
        ids,
    )
    await pool.execute(
        """INSERT INTO containers (id, deploy_id, node, pod, workload, image, tenant, class, allocation, state)
           SELECT 'c' || substr(d, 2), d, ($2::text[])[1 + (n % 16)::int], 'p1', 'w', 'busybox', 'default', 'prod',
                  $3::jsonb, 'planned'
             FROM unnest($1::text[]) WITH ORDINALITY AS u (d, n)""",
        ids,
        NODES,
        ALLOCATION,
    )


async def measure(batches: int, messages: int, events: int) -> dict[str, Any]:
    """Start a server, fill it, apply the batches; the figures as a dict."""
    per_batch = messages * events
    with tempfile.TemporaryDirectory(prefix="eru-bench-events-") as state:
        server = EmbeddedPostgres(Path(state), durable=True)
        server.start()
        try:
            server.create_database("bench")
            dsn = server.dsn_for("bench")
            pool = await create_pool(dsn, min_size=1, max_size=1)
            statements: list[str] = []
            try:
                await apply_migrations(pool)
                await _fill(pool, batches * per_batch + per_batch)
                async with pool.acquire() as conn:
                    conn.add_query_logger(lambda query: statements.append(query.query))
                ctx = EventContext(pool, "bench")
                walls: list[float] = []
                counts: list[int] = []
                cpu = time.process_time()
                for index in range(batches + 1):  # the first batch warms the connection's type cache up: not counted
                    items = []
                    for m in range(messages):
                        base = index * per_batch + m * events
                        reported = [
                            ContainerEvent(
                                node=NODES[(base + e) % 16],
                                container_id=f"c{base + e:06d}",
                                deploy_id=f"d{base + e:06d}",
                                kind="started",
                            )
                            for e in range(events)
                        ]
                        items.append((reported, new_envelope("eru.container.batch", "bench")))
                    statements.clear()
                    if index == 1:
                        cpu = time.process_time()
                    started = time.perf_counter()
                    await apply_events(ctx, items)
                    if index > 0:
                        walls.append(time.perf_counter() - started)
                        counts.append(len(statements))
                cpu = time.process_time() - cpu
                completed = await pool.fetchval("SELECT count(*) FROM deploys WHERE status = 'completed'")
            finally:
                await pool.close()
        finally:
            server.stop()
    return {
        "benchmark": "container_event_batch",
        "batches": batches,
        "events_per_batch": per_batch,
        "messages_per_batch": messages,
        "deploys_completed": completed,
        "batch_ms": {
            "median": round(1000 * statistics.median(walls), 3),
            "p90": round(1000 * _percentile(walls, 0.9), 3),
            "p99": round(1000 * _percentile(walls, 0.99), 3),
        },
        "events_per_second": round(batches * per_batch / sum(walls), 1),
        "client_cpu_ms_per_event": round(1000 * cpu / (batches * per_batch), 4),
        "statements_per_batch": statistics.median(counts),
    }


def main() -> None:
    """Parse arguments, run, print JSON (logs to stderr, warnings only)."""
    configure_logging("bench", "bench", log_format="json", level="warning")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--messages", type=int, default=16, help="node messages per batch")
    parser.add_argument("--events", type=int, default=2, help="started events per message")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.batches, args.messages, args.events)), indent=2))


if __name__ == "__main__":
    main()
