"""Realloc through the real pipeline: deltas, whole-group fit or fail, the node agent's refusal restores."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from pipeline_harness import (
    GiB,
    Pipeline,
    ScriptedPipeline,
    assert_usage_consistent,
    pipeline_with_sim_nodes,
)

from eru.bus import RemoteError
from eru.domain import NodeCommand
from eru.domain.messages import ReallocRequest
from eru.plan_api import solve

REFUSED: set[str] = set()


def refuse_some_updates(command: NodeCommand) -> str | None:
    return "engine refused the update" if command.kind == "update" and command.container_id in REFUSED else None


@pytest_asyncio.fixture
async def sim_pipeline(nats_url: str, postgres_dsn: str) -> AsyncIterator[Pipeline]:
    """The pipeline with the real node agent (sim runtime): one node `sim`, 4 cores, 8 GiB."""
    async with pipeline_with_sim_nodes(nats_url, postgres_dsn, count=1) as pipe:
        yield pipe


@pytest_asyncio.fixture
async def pipeline(scripted_pipeline: ScriptedPipeline) -> AsyncIterator[Pipeline]:
    pipe, _ = await scripted_pipeline({"n1": {"cores": 4, "memory": 8 * GiB}}, fail=refuse_some_updates)
    try:
        yield pipe
    finally:
        REFUSED.clear()


async def _allocations(pipe: Pipeline, ids: list[str]) -> dict[str, dict[str, int]]:
    rows = await pipe.pool.fetch("SELECT id, allocation FROM containers WHERE id = ANY($1::text[])", ids)
    return {r["id"]: json.loads(r["allocation"])["cpu_map"] for r in rows}


async def test_realloc_grows_in_place_then_refuses_what_does_not_fit(sim_pipeline: Pipeline) -> None:
    pipeline = sim_pipeline
    resources = {"cpu_bind": True, "cpu_request": 1, "memory_request": GiB}
    deploy_id = await pipeline.deploy(count=2, workload={"name": "db", "image": "pg", "resources": resources})
    ids = (await pipeline.terminal(deploy_id)).started
    before = await _allocations(pipeline, ids)

    reply = await pipeline.op("realloc", ReallocRequest(container_ids=ids, cpu_request=1, memory_request="512MiB"))
    assert len(reply.rows) == 2
    await pipeline.wait_for(
        lambda: pipeline.pool.fetchval("SELECT count(*) FROM containers WHERE state = 'running'"), 2
    )
    after = await _allocations(pipeline, ids)
    for cid in ids:
        assert sum(after[cid].values()) == 200
    assert not set(after[ids[0]]) & set(after[ids[1]])  # whole cores, never shared
    assert any(set(before[cid]) <= set(after[cid]) for cid in ids)  # cores already held are preferred
    await assert_usage_consistent(pipeline.pool)
    node = await pipeline.pool.fetchrow("SELECT used_cpu_map, used_memory FROM nodes WHERE name = 'sim'")
    assert sum(json.loads(node["used_cpu_map"]).values()) == 400
    assert node["used_memory"] == 3 * GiB

    with pytest.raises(RemoteError) as short:
        await pipeline.op("realloc", ReallocRequest(container_ids=ids, cpu_request=0.5))
    assert short.value.code != "invalid_input"
    assert await _allocations(pipeline, ids) == after  # nothing changed

    with pytest.raises(RemoteError) as negative:
        await pipeline.op("realloc", ReallocRequest(container_ids=ids[:1], memory_request="-4GiB"))
    assert negative.value.code == "invalid_input"
    assert "memory_request" in negative.value.message


async def test_a_refused_update_restores_the_old_allocation(pipeline: Pipeline) -> None:
    resources = {"cpu_bind": True, "cpu_request": 1, "memory_request": GiB}
    deploy_id = await pipeline.deploy(count=1, workload={"name": "db", "image": "pg", "resources": resources})
    (cid,) = (await pipeline.terminal(deploy_id)).started
    before = await pipeline.pool.fetchrow("SELECT allocation, resources FROM containers WHERE id = $1", cid)
    REFUSED.add(cid)
    await pipeline.op("realloc", ReallocRequest(container_ids=[cid], cpu_request=1))
    await pipeline.wait_for(
        lambda: pipeline.pool.fetchval("SELECT reason FROM containers WHERE id = $1", cid), "engine refused the update"
    )
    decision = await pipeline.pool.fetchrow("SELECT input, output FROM decisions WHERE kind = 'realloc'")
    assert solve(json.loads(decision["input"])) == json.loads(decision["output"])  # `eru plan` re-runs it
    row = await pipeline.pool.fetchrow("SELECT state, allocation, resources FROM containers WHERE id = $1", cid)
    assert row["state"] == "running"
    assert json.loads(row["allocation"]) == json.loads(before["allocation"])
    assert json.loads(row["resources"]) == json.loads(before["resources"])
    await assert_usage_consistent(pipeline.pool)
