"""The allocator's deploy path in process (docs/performance.md "Planning ahead"): `commit_batch` over
batches of single-container requests, with the in-memory store and bus (eru.testing) and the distributor's pure
`place_batch` answering in process. Process CPU per request of the planning path alone (validation, snapshot,
stage, prediction, the distributor's answer, conclude, the decision record, rows, commands, events), without
PostgreSQL, NATS or the machine's other load — the part of the allocator's per-request cost this page tracks.

    python bench/bench_allocator_batch.py [--nodes 16] [--requests 2000] [--batch 128] [--runs 5]
        [--commit-ms 0.6 --concurrency 256 [--no-plan-ahead]] [--default-gc]

Prints JSON: ms of process time per request, per run and the median. With `--commit-ms`, the requests go through
the allocator's pipelined batcher at once (at most `--concurrency` in flight, as the consumer allows) and each
batch's submit waits that many ms per request, as a commit in PostgreSQL (another process) would: the wall time
then shows what planning a batch while the previous one commits saves (`--no-plan-ahead`: one batch at a time).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from eru.bus import new_envelope
from eru.domain import DeployRequest
from eru.gc_tuning import collect_less
from eru.logging import configure_logging
from eru.planning import NodeResources, PlanningConfig
from eru.store.protocol import PodWrites
from eru.testing.memory_bus import InMemoryBus, serve_placement
from eru.testing.memory_store import InMemoryStore, MemoryPodSession
from eru_allocator.deploy.context import Context
from eru_allocator.deploy.pipeline import commit_batch
from eru_allocator.deploy.requests import validate
from eru_allocator.flow.batcher import Batcher

CONFIG = PlanningConfig()


class SlowCommitStore(InMemoryStore):
    """Submits take `commit_ms` per request of the batch, without CPU (PostgreSQL's work, elsewhere)."""

    def __init__(self, commit_ms: float) -> None:
        super().__init__()
        self.commit_ms = commit_ms

    @asynccontextmanager
    async def pod(self, pod: str) -> AsyncIterator[MemoryPodSession]:
        """The in-memory session, its submit taking the commit time (under the pod's lock, as in PostgreSQL)."""
        async with super().pod(pod) as session:
            submit = session.submit

            async def slow_submit(writes: PodWrites) -> None:
                await submit(writes)
                await asyncio.sleep(self.commit_ms * len(writes.deploys) / 1000)

            session.submit = slow_submit  # type: ignore[method-assign]
            yield session


async def one_run(
    nodes: int, requests: int, batch: int, commit_ms: float = 0.0, concurrency: int = 256, ahead: bool = True
) -> tuple[float, float]:
    """(ms of process time, ms of wall time) per request for `requests` singles in batches of `batch`."""
    store = SlowCommitStore(commit_ms)
    store.add_pod("bench")
    for index in range(nodes):
        store.add_node("bench", NodeResources(f"sim-{index:03d}", {str(c): 100 for c in range(64)}, 512 << 30))
    bus = InMemoryBus()
    serve_placement(bus)
    ctx = Context(store, bus, CONFIG, "allocator/bench", 5.0, 30.0)
    if not ahead:  # set only when off: an older allocator (an A/B's before side) has no such field
        ctx = dataclasses.replace(ctx, plan_ahead=False)
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
    started, wall = time.process_time(), time.perf_counter()
    if not commit_ms:
        for start in range(0, requests, batch):
            await commit_batch(ctx, "bench", items[start : start + batch])
    else:
        batcher: Batcher[Any, Any] = Batcher(
            lambda pod, chunk: commit_batch(ctx, pod, chunk), max_batch=batch, pipelined=ahead
        )
        slots = asyncio.Semaphore(concurrency)

        async def handle(item: Any) -> Any:
            async with slots:
                return await batcher.submit("bench", item)

        await asyncio.gather(*(handle(item) for item in items))
    return (time.process_time() - started) * 1000 / requests, (time.perf_counter() - wall) * 1000 / requests


def main() -> None:
    """Parse arguments, run, print JSON (logs: warnings only, as the bench stacks run)."""
    configure_logging("bench", "bench", log_format="json", level="warning")
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--commit-ms", type=float, default=0.0, help="simulated commit time per request")
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--no-plan-ahead", action="store_true")
    parser.add_argument(
        "--default-gc", action="store_true", help="CPython's collector settings, not the services' (eru.gc_tuning)"
    )
    args = parser.parse_args()
    if not args.default_gc:
        collect_less()  # as every service does before it serves
    measured = [
        asyncio.run(
            one_run(args.nodes, args.requests, args.batch, args.commit_ms, args.concurrency, not args.no_plan_ahead)
        )
        for _ in range(args.runs)
    ]
    runs = [round(cpu, 4) for cpu, _ in measured]
    walls = [round(wall, 4) for _, wall in measured]
    print(
        json.dumps(
            {
                "benchmark": "allocator_commit_batch_in_process",
                "setup": {
                    "nodes": args.nodes,
                    "requests": args.requests,
                    "batch": args.batch,
                    "commit_ms": args.commit_ms,
                    "plan_ahead": not args.no_plan_ahead,
                    "gc": "default" if args.default_gc else "eru.gc_tuning",
                },
                "ms_per_request": statistics.median(runs),
                "runs_ms_per_request": runs,
                "wall_ms_per_request": statistics.median(walls),
                "runs_wall_ms_per_request": walls,
            }
        )
    )


if __name__ == "__main__":
    main()
