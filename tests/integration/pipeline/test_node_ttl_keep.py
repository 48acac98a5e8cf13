"""A node whose agent dies is down within its TTL, its containers `lost`, and a `--keep` workload (a service and a
batch one alike) is back at its count on the other node (docs/node-agent.md "Health and node TTL")."""

from __future__ import annotations

from typing import Any

import pytest
from colocation_harness import sim_node
from pipeline_harness import GiB, Pipeline

from eru.domain.messages import CordonRequest, QueryRequest

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

TTL = 3.0  # allocator.node_down_after_seconds: the test waits seconds, not the default 30
KEEP = {"replace_base_seconds": 0.5, "replace_max_delay_seconds": 5}
LIVE = "SELECT node, count(*) AS n FROM containers WHERE workload = $1 AND state = 'running' GROUP BY node"


def _workload(name: str, priority_class: str) -> dict[str, Any]:
    resources = {"cpu_request": 1, "memory_request": GiB, "cpu_bind": priority_class == "batch"}
    return {"name": name, "image": "sim", "priority_class": priority_class, "resources": resources}


async def _running(pipeline: Pipeline, workload: str) -> dict[str, int]:
    return {row["node"]: row["n"] for row in await pipeline.pool.fetch(LIVE, workload)}


@pytest.mark.parametrize("priority_class", ["prod", "batch"])
async def test_a_killed_agents_node_goes_down_and_kept_work_comes_back_elsewhere(
    nats_url: str, postgres_dsn: str, priority_class: str
) -> None:
    pipeline = Pipeline(nats_url, postgres_dsn)
    await pipeline.start(keep=KEEP, keep_interval_seconds=0.3, node_down_after_seconds=TTL, sweep_interval_seconds=0.5)
    try:
        async with sim_node(pipeline, "sim-b"):
            dying = sim_node(pipeline, "sim-a")
            await dying.__aenter__()
            await pipeline.wait_for(lambda: pipeline.pool.fetchval("SELECT count(*) FROM nodes"), 2)
            # both instances on sim-a: sim-b is cordoned while they are placed
            await pipeline.op("cordon", _cordon("sim-b", True))
            kept = await pipeline.deploy(count=2, keep=True, workload=_workload("api", priority_class))
            assert (await pipeline.terminal(kept)).kind == "completed"
            assert await _running(pipeline, "api") == {"sim-a": 2}
            await pipeline.op("cordon", _cordon("sim-b", False))
            lost_before = await pipeline.pool.fetch("SELECT id FROM containers WHERE workload = 'api'")

            await dying.__aexit__(None, None, None)  # the agent stops: no more heartbeats from sim-a

            await pipeline.wait_for(lambda: _running(pipeline, "api"), {"sim-b": 2}, within=60)
            rows = await pipeline.pool.fetch(
                "SELECT state, reason FROM containers WHERE id = ANY($1::text[])", [r["id"] for r in lost_before]
            )
            assert {r["state"] for r in rows} == {"lost"}
            assert all("node sim-a down: no heartbeat for" in r["reason"] for r in rows)
            assert all(f"(TTL {TTL:g}s)" in r["reason"] for r in rows)
            nodes = await pipeline.op("query", QueryRequest(what="nodes", pod="p1"))
            states = {row["name"]: row["state"] for row in nodes.rows}
            assert states["sim-a"] == "down"
            assert states["sim-b"] == "up"
            # the keeper announces each instance lost, then placed again (its next round after the container runs)
            await pipeline.wait_for(lambda: _keep_kinds(pipeline, kept), {"lost": 2, "replacing": 2, "placed": 2})
    finally:
        await pipeline.close()


def _cordon(node: str, on: bool) -> CordonRequest:
    return CordonRequest(node=node, cordoned=on)


async def _keep_kinds(pipeline: Pipeline, deploy_id: str) -> dict[str, int]:
    kinds = [e.keep.kind for e in pipeline.events.get(deploy_id, []) if e.kind == "keep" and e.keep is not None]
    return {kind: kinds.count(kind) for kind in sorted(set(kinds))}
