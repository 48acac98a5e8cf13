"""The whole chain: a real node agent (sim runtime) reports metrics, a real eviction replica computes the node's batch
capacity from the prod reservation and publishes it, the allocator stores it and places batch against it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from colocation_harness import eviction_replica, sim_node
from pipeline_harness import Pipeline

from eru.bus import RemoteError
from eru.nodeagent.load import LOAD_LABEL

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]

GiB = 1 << 30
NODE = "sim-a"
# 1 s samples, short windows; the prod reservation stays at its request for the whole test (start-up period)
WATERMARKS: dict[str, Any] = {"window_seconds": 10, "metrics_interval_seconds": 1, "reservation_startup_seconds": 600}


def _workload(name: str, priority_class: str, cpu: float, cpu_bind: bool) -> dict[str, Any]:
    resources = {"cpu_bind": cpu_bind, "cpu_request": cpu, "memory_request": GiB}
    # every container uses half a core: the node stays far below the watermarks (no forbid-schedule)
    labels = {LOAD_LABEL: json.dumps({"kind": "constant", "cpu": 0.5})}
    return {"name": name, "image": "sim", "priority_class": priority_class, "resources": resources, "labels": labels}


async def test_batch_goes_against_the_capacity_the_eviction_service_reclaims(nats_url: str, postgres_dsn: str) -> None:
    pipeline = Pipeline(nats_url, postgres_dsn)
    await pipeline.start()
    try:
        async with sim_node(pipeline, NODE), eviction_replica(nats_url, WATERMARKS):
            await pipeline.wait_for(lambda: pipeline.pool.fetchval("SELECT count(*) FROM nodes"), 1)
            # prod asks 6 of the 8 cores, memory-prime: the allocator reserves no cores for it, the eviction
            # service does (its reservation is its request during start-up): 2 cores are left for batch
            prod = await pipeline.deploy(count=1, workload=_workload("web", "prod", 6, False))
            assert (await pipeline.terminal(prod)).kind == "completed"
            capacity = "SELECT (conditions->>'batch_cpu_capacity')::float8 FROM node_status WHERE name = $1"
            await pipeline.wait_for(lambda: pipeline.pool.fetchval(capacity, NODE), 2.0, within=30)

            with pytest.raises(RemoteError) as refused:
                await pipeline.deploy(count=3, workload=_workload("crunch", "batch", 1, True))
            assert refused.value.code == "insufficient_capacity"
            entry = refused.value.details["resources"][NODE]
            assert (entry["limited_by"], entry["capacity"], entry["ordinary_capacity"]) == ("batch_cpu", 2, 8)

            batch = await pipeline.deploy(count=2, workload=_workload("crunch", "batch", 1, True))
            assert (await pipeline.terminal(batch)).kind == "completed"
            # the eviction service now sees the two batch containers: nothing left for batch
            await pipeline.wait_for(lambda: pipeline.pool.fetchval(capacity, NODE), 0.0, within=30)
            with pytest.raises(RemoteError):
                await pipeline.deploy(count=1, workload=_workload("more", "batch", 1, True))
            more_prod = await pipeline.deploy(count=2, workload=_workload("api", "prod", 1, True))
            assert (await pipeline.terminal(more_prod)).kind == "completed"  # prod is not bounded by it
            decision = json.loads(
                await pipeline.pool.fetchval(
                    "SELECT input FROM decisions WHERE output->'deploy' ? $1 ORDER BY created_at DESC LIMIT 1", NODE
                )
            )
            assert "priority_class" not in decision
    finally:
        await pipeline.close()
