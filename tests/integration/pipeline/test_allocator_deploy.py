"""Deploys through the real pipeline (allocator + distributor + outbox relay + JetStream + PostgreSQL)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from pipeline_harness import Pipeline, ScriptedNodeAgent, assert_usage_consistent


@pytest_asyncio.fixture
async def pipeline(nats_url: str, postgres_dsn: str) -> AsyncIterator[Pipeline]:
    pipe = Pipeline(nats_url, postgres_dsn)
    await pipe.start()
    agent = ScriptedNodeAgent(
        pipe.nc, fail=lambda c: "image pull failed" if c.spec and "bad" in c.spec.workload.image else None
    )
    await agent.start()
    for name in ("n1", "n2", "n3"):
        await pipe.register(name)
    try:
        yield pipe
    finally:
        await agent.stop()
        await pipe.close()


def workload(name: str = "web", image: str = "busybox", **resources: Any) -> dict[str, Any]:
    return {"name": name, "image": image, "resources": resources}


async def test_auto_deploy_runs_every_container_and_charges_nodes(pipeline: Pipeline) -> None:
    deploy_id = await pipeline.deploy(
        count=5, mode="auto", workload=workload(cpu_bind=True, cpu_request=1.5, memory_request="512MiB")
    )
    done = await pipeline.terminal(deploy_id)
    assert done.kind == "completed"
    assert len(done.started) == 5
    planned = next(e for e in pipeline.events[deploy_id] if e.kind == "planned")
    assert sorted(planned.placements.values()) == [1, 2, 2]
    rows = await pipeline.containers(deploy_id=deploy_id)
    assert {r["state"] for r in rows} == {"running"}
    for row in rows:
        allocation = json.loads(row["allocation"])
        assert sum(allocation["cpu_map"].values()) == 150
        assert allocation["memory"] == 512 * 1024**2
    await assert_usage_consistent(pipeline.pool)
    decision = await pipeline.pool.fetchrow("SELECT input, output FROM decisions WHERE id = $1", planned.decision_id)
    problem = json.loads(decision["input"])
    assert [n["name"] for n in problem["nodes"]] == ["n1", "n2", "n3"]
    assert json.loads(decision["output"])["deploy"] == planned.placements
