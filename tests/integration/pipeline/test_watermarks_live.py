"""Watermarks as live configuration (docs/colocation.md "Watermarks set live"), with a real nats-server, PostgreSQL,
allocator and eviction replica: `eru node set n1 --watermark cpu_suppress=50` is stored, published and applied by the
running replica (no restart) at its next samples, so a node at 60 % CPU — between the old suppress line (65 %) and
the new (50 %) — becomes suppressed; bad input changes nothing; clearing the override lifts the suppression."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from colocation_harness import eviction_replica
from pipeline_harness import Pipeline, eru_cli

from eru.bus import decode, new_envelope, publish
from eru.bus.connection import settle
from eru.domain import ContainerMetrics, NodeCondition, NodeMetrics

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

GIB = 1024**3
WATERMARKS: dict[str, Any] = {"window_seconds": 10, "metrics_interval_seconds": 1, "cpu_cooldown_seconds": 2}


def _sample(at: float) -> NodeMetrics:
    """A 32-core node at 19.2 cores (60 %): prod p1 uses 15.2, batch b0 (4 cores asked) uses 4."""
    containers = [
        ContainerMetrics(
            container_id="p1",
            priority_class="prod",
            priority=0,
            tenant="t",
            cpu_used=15.2,
            memory_used=8 * GIB,
            cpu_request=16,
            memory_request=8 * GIB,
        ),
        ContainerMetrics(
            container_id="b0",
            priority_class="batch",
            priority=0,
            tenant="t",
            cpu_used=4.0,
            memory_used=GIB,
            cpu_request=4,
            memory_request=GIB,
            cpu_limit=4,
        ),
    ]
    return NodeMetrics(
        node="n1",
        pod="p1",
        time=at,
        cpu_capacity=32,
        cpu_used=19.2,
        memory_used=12 * GIB,
        memory_total=64 * GIB,
        containers=containers,
    )


async def _until(check: Any, arrived: asyncio.Event, within: float = 30.0) -> None:
    """Wait for `check()` to hold, looking again at each condition that `arrived` (a hang guard, not a timed
    assertion)."""
    async with asyncio.timeout(within):
        while not check():
            arrived.clear()
            await arrived.wait()


@contextlib.asynccontextmanager
async def _samples(pipeline: Pipeline) -> AsyncIterator[None]:
    """Publish a sample of n1 every metrics interval (1 s), as its agent would."""

    async def run() -> None:
        while True:
            await publish(pipeline.js, "eru.metrics.n1", _sample(time.time()), new_envelope("eru.metrics", "agent"))
            await asyncio.sleep(1.0)

    task = asyncio.create_task(run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_watermark_set_live_is_applied_without_a_restart(nats_url: str, postgres_dsn: str) -> None:
    pipeline = Pipeline(nats_url, postgres_dsn)
    await pipeline.start()
    conditions: list[NodeCondition] = []
    arrived = asyncio.Event()

    async def on_condition(msg: Any) -> None:
        conditions.append(decode(msg.data, NodeCondition))
        arrived.set()

    await pipeline.nc.subscribe("eru.node.n1.condition", cb=on_condition)
    await settle(pipeline.nc)
    try:
        await pipeline.register("n1", cores=32, memory=64 * GIB)
        async with eviction_replica(nats_url, WATERMARKS), _samples(pipeline):
            await _until(lambda: bool(conditions) and conditions[-1].state == "normal", arrived)
            assert conditions[-1].watermarks["cpu_suppress"] == 65  # 60 % is below the default line

            code, out = await eru_cli("node", "set", "n1", "--watermark", "cpu_evict=45", "--nats", nats_url)
            assert code != 0
            assert out.strip().splitlines()[-1] == (
                "error: node.n1.cpu_evict: cpu_evict (45) must be at least cpu_suppress (65): watermarks go "
                "evict ≥ suppress ≥ forbid"
            )
            assert await pipeline.pool.fetchval("SELECT count(*) FROM watermark_overrides") == 0  # nothing applied
            code, out = await eru_cli("node", "set", "n9", "--watermark", "cpu_evict=80", "--nats", nats_url)
            assert (code, out.strip().splitlines()[-1]) == (
                4,
                "error: node: unknown node 'n9'",
            )  # not found (docs/cli.md "Exit codes")
            code, out = await eru_cli("node", "set", "n1", "--watermark", "cpu_evikt=80", "--nats", nats_url)
            assert code == 2
            assert "--watermark cpu_evikt: unknown watermark 'cpu_evikt'" in out

            seen = len(conditions)
            change = ("--watermark", "cpu_forbid=40", "--watermark", "cpu_suppress=50")
            code, out = await eru_cli("node", "set", "n1", *change, "--nats", nats_url)
            assert code == 0, out
            assert out.strip() == "node n1 watermarks: cpu_forbid=40 cpu_suppress=50"

            def suppressed() -> bool:
                return any(c.state == "suppressed" for c in conditions[seen:])

            await _until(suppressed, arrived)
            condition = next(c for c in conditions[seen:] if c.state == "suppressed")
            assert condition.watermarks["cpu_suppress"] == 50
            assert condition.replica == "r1"  # the same replica: no restart
            # 32 × 50 % − 15.2 cores of prod = 0.8 cores for batch
            assert condition.batch_cpu_allowed == pytest.approx(0.8)

            code, out = await eru_cli("node", "ls", "-o", "json", "--nats", nats_url)
            assert code == 0, out
            [row] = json.loads(out)["nodes"]
            assert row["watermark_overrides"] == {"node": {"cpu_forbid": 40, "cpu_suppress": 50}, "pod": None}
            assert row["conditions"]["watermarks"]["cpu_suppress"] == 50

            seen = len(conditions)
            code, out = await eru_cli("node", "set", "n1", "--clear-watermarks", "--nats", nats_url)
            assert code == 0, out
            assert out.strip() == "node n1 watermarks: -"
            # the allowance is raised step by step (10 % of the node per sample), then lifted
            await _until(lambda: any(c.batch_cpu_allowed is None for c in conditions[seen:]), arrived)
            lifted = next(c for c in conditions[seen:] if c.batch_cpu_allowed is None)
            assert lifted.watermarks["cpu_suppress"] == 65
            # forbid-schedule set under cpu_forbid=40 clears only 5 points below the restored 65 %: 60 % is not below
            assert lifted.state == "forbid"
    finally:
        await pipeline.close()
