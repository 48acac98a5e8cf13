"""The allocator's deploy path in process (docs/performance.md "Single-container requests"): `commit_batch` over
batches of single-container requests, with the in-memory store and bus (eru.testing) and the distributor's pure
`place_batch` answering in process. Process CPU per request of the planning path alone (validation, snapshot,
stage, prediction, the distributor's answer, conclude, the decision record, rows, commands, events), without
PostgreSQL, NATS or the machine's other load — the part of the allocator's per-request cost this page tracks.

    python bench/bench_allocator_batch.py [--nodes 16] [--requests 2000] [--batch 128] [--runs 5]

Prints JSON: ms of process time per request, per run and the median.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from eru.bus import new_envelope
from eru.domain import DeployRequest
from eru.logging import configure_logging
from eru.planning import NodeResources, PlanningConfig
from eru.testing.memory_bus import InMemoryBus, serve_placement
from eru.testing.memory_store import InMemoryStore
from eru_allocator.deploys import Context, commit_batch, validate

CONFIG = PlanningConfig()


async def one_run(nodes: int, requests: int, batch: int) -> float:
    """ms of process time per request for `requests` singles in batches of `batch` over fresh nodes."""
    store = InMemoryStore()
    store.add_pod("bench")
    for index in range(nodes):
        store.add_node("bench", NodeResources(f"sim-{index:03d}", {str(c): 100 for c in range(64)}, 512 << 30))
    bus = InMemoryBus()
    serve_placement(bus)
    ctx = Context(store, bus, CONFIG, "allocator/bench", 5.0, 30.0)
    items: list[Any] = []
    for index in range(requests):
        req = DeployRequest.model_validate(
            {
                "request_id": f"r{index}",
                "pod": "bench",
                "count": 1,
                "mode": "auto",
                "workload": {
                    "name": f"w-{index % 10}",
                    "image": "busybox",
                    "resources": {"cpu_bind": True, "cpu_request": 0.1, "memory_request": "16MiB"},
                },
            }
        )
        items.append((req, validate(req, CONFIG), new_envelope("eru.deploy.request", "bench")))
    started = time.process_time()
    for start in range(0, requests, batch):
        await commit_batch(ctx, "bench", items[start : start + batch])
    return (time.process_time() - started) * 1000 / requests


def main() -> None:
    """Parse arguments, run, print JSON (logs: warnings only, as the bench stacks run)."""
    configure_logging("bench", "bench", log_format="json", level="warning")
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    runs = [round(asyncio.run(one_run(args.nodes, args.requests, args.batch)), 4) for _ in range(args.runs)]
    print(
        json.dumps(
            {
                "benchmark": "allocator_commit_batch_in_process",
                "setup": {"nodes": args.nodes, "requests": args.requests, "batch": args.batch},
                "ms_per_request": statistics.median(runs),
                "runs_ms_per_request": runs,
            }
        )
    )


if __name__ == "__main__":
    main()
