"""Unbound (memory-prime) CPU counts against a tenant's limit and in `tenant ls`, and `node ls` shows a node's
requested CPU beside its bound CPU, through the real pipeline (NATS + PostgreSQL + allocator + distributor + a
scripted node agent). docs/fairness-and-scoring.md, "What is counted where"."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from pipeline_harness import GiB, Pipeline, ScriptedNodeAgent, eru_cli

from eru.bus import RemoteError
from eru.domain.messages import QueryRequest
from eru.domain.tenants import TenantCreateRequest, TenantListRequest


@pytest_asyncio.fixture
async def pipeline(nats_url: str, postgres_dsn: str) -> AsyncIterator[Pipeline]:
    """One allocator, a distributor, a scripted node agent and one node of 64 cores / 256 GiB in pod p1."""
    pipe = Pipeline(nats_url, postgres_dsn)
    await pipe.start()
    agent = ScriptedNodeAgent(pipe.nc)
    await agent.start()
    await pipe.register("n1", cores=64, memory=256 * GiB)
    try:
        yield pipe
    finally:
        await agent.stop()
        await pipe.close()


def unbound(tenant: str, cpu: float, name: str = "svc") -> dict[str, Any]:
    return {
        "name": name,
        "image": "busybox",
        "tenant": tenant,
        "resources": {"cpu_bind": False, "cpu_request": cpu, "memory_request": "1GiB"},
    }


async def _tenant(pipeline: Pipeline, name: str) -> dict[str, Any]:
    reply = await pipeline.op("tenant-ls", TenantListRequest(pod="p1"))
    return next(row for row in reply.rows if row["name"] == name)


async def _node(pipeline: Pipeline) -> dict[str, Any]:
    reply = await pipeline.op("query", QueryRequest(what="nodes"))
    (row,) = reply.rows
    return dict(row)


async def test_a_limit_counts_requested_unbound_cpu(pipeline: Pipeline) -> None:
    await pipeline.op("tenant-create", TenantCreateRequest(name="L", limit={"cpu": 8}))
    for wait in (0, 30):  # refused at once, waiting or not: its demand alone is over the limit
        with pytest.raises(RemoteError) as caught:
            await pipeline.deploy(count=10, workload=unbound("L", 12), wait_seconds=wait)
        assert caught.value.code == "tenant_limit"
        assert "tenant 'L' would exceed its limit (cpu: has 0, needs 120 more, limit 8)" in caught.value.message
    assert await pipeline.pool.fetchval("SELECT count(*) FROM containers") == 0
    assert await pipeline.pool.fetchval("SELECT count(*) FROM deploy_waits") == 0

    done = await pipeline.terminal(await pipeline.deploy(count=2, workload=unbound("L", 3)))
    assert done.kind == "completed"
    row = await _tenant(pipeline, "L")
    assert (row["allocated"], row["allocations"]) == ({"cpu": 6, "memory": 2 * GiB}, 2)
    assert row["dominant_share"] == pytest.approx(6 / 64)
    with pytest.raises(RemoteError, match=r"cpu: has 6, needs 3 more, limit 8") as caught:
        await pipeline.deploy(count=1, workload=unbound("L", 3))
    assert caught.value.code == "tenant_limit"

    node = await _node(pipeline)
    assert (node["cpu_total"], node["cpu_bound"], node["cpu_requested"]) == (64, 0, 6)
    assert sum(node["used_cpu_map"].values()) == 0  # memory-prime: no core is bound


async def test_node_ls_shows_requested_and_bound_cpu_and_an_oversold_node(pipeline: Pipeline) -> None:
    # a tenant without a limit may request more CPU than the node has, unbound (memory-prime oversell)
    wide = await pipeline.terminal(await pipeline.deploy(count=20, workload=unbound("default", 16)))
    assert wide.kind == "completed"
    bound = {"name": "db", "image": "busybox", "resources": {"cpu_bind": True, "cpu_request": 2, "memory_request": 0}}
    assert (await pipeline.terminal(await pipeline.deploy(count=2, workload=bound))).kind == "completed"
    node = await _node(pipeline)
    assert (node["cpu_total"], node["cpu_bound"], node["cpu_requested"]) == (64, 4, 324)
    row = await _tenant(pipeline, "default")
    assert row["allocated"]["cpu"] == 324

    nats = ["--nats", pipeline.nats_url]
    code, out = await eru_cli("node", "ls", "-o", "json", *nats)
    assert code == 0, out
    listed = json.loads(out)
    assert (listed["schema"], listed["schema_version"]) == ("eru.cli/node-ls", 1)
    (shown,) = listed["nodes"]
    assert (shown["cpu_total"], shown["cpu_bound"], shown["cpu_requested"]) == (64, 4, 324)
    assert sum(shown["used_cpu_map"].values()) == 400  # the existing fields stay
    code, out = await eru_cli("node", "ls", *nats)
    assert code == 0, out
    assert "cpu bound/total, requested" in out
    line = next(text for text in out.splitlines() if "n1" in text)
    assert "4/64, 324 (oversold 5.1x)" in line, line
