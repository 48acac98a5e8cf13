"""`eru node ls` shows each node's watermark state as the eviction service last published it."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest_asyncio
from pipeline_harness import Pipeline
from rich.console import Console

from eru.bus import new_envelope, publish
from eru.bus.subjects import node_condition
from eru.cli.node_commands import node_table, watermark_state
from eru.domain import NodeCondition
from eru.domain.messages import QueryRequest


@pytest_asyncio.fixture
async def pipeline(nats_url: str, postgres_dsn: str) -> AsyncIterator[Pipeline]:
    pipe = Pipeline(nats_url, postgres_dsn)
    await pipe.start()
    for name in ("n1", "n2"):
        await pipe.register(name)
    try:
        yield pipe
    finally:
        await pipe.close()


async def test_conditions_reach_the_node_table(pipeline: Pipeline) -> None:
    condition = NodeCondition(
        node="n1",
        time=time.time(),
        state="suppressed",
        forbid_schedule_cpu=True,
        batch_cpu_allowed=4.4,
        evicting=["b0", "b1"],
    )
    await publish(pipeline.js, node_condition("n1"), condition, new_envelope("eru.node.condition", "eviction/r1"))

    async def n1_state() -> str:
        reply = await pipeline.op("query", QueryRequest(what="nodes"))
        return next(watermark_state(row.get("conditions")) for row in reply.rows if row["name"] == "n1")

    await pipeline.wait_for(n1_state, "forbid (cpu), suppressed to 4.4 cores, evicting 2")
    reply = await pipeline.op("query", QueryRequest(what="nodes"))
    console = Console(width=250, record=True)
    console.print(node_table(reply.rows))
    lines = console.export_text().splitlines()
    assert "forbid (cpu), suppressed to 4.4 cores, evicting 2" in next(line for line in lines if "n1" in line)
    assert next(line for line in lines if "n2" in line).rstrip().rstrip("│").rstrip().endswith("-")


def test_watermark_state_wording() -> None:
    assert watermark_state(None) == "-"
    assert watermark_state({"state": "normal"}) == "normal"
    assert watermark_state({"forbid_schedule_memory": True}) == "forbid (memory)"
