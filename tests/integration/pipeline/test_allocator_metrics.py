"""The allocator's domain counters: eru_allocations_total grows by the containers a committed deploy allocated."""

from __future__ import annotations

import pytest
import pytest_asyncio
from pipeline_harness import Pipeline, ScriptedPipeline
from prometheus_client import REGISTRY

from eru.bus.errors import RemoteError


@pytest_asyncio.fixture
async def pipeline(scripted_pipeline: ScriptedPipeline) -> Pipeline:
    pipe, _ = await scripted_pipeline({"n1": {"pod": "metrics-pod", "cores": 4}})
    return pipe


def _allocations() -> float:
    return REGISTRY.get_sample_value("eru_allocations_total", {"pod": "metrics-pod"}) or 0.0


async def test_allocations_are_counted_once_committed(pipeline: Pipeline) -> None:
    before = _allocations()
    workload = {"name": "web", "image": "busybox", "resources": {"cpu_bind": True, "cpu_request": 1}}
    deploy_id = await pipeline.deploy(pod="metrics-pod", count=3, workload=workload)
    assert (await pipeline.terminal(deploy_id)).kind == "completed"
    assert _allocations() == before + 3
    with pytest.raises(RemoteError, match="capacity"):  # only 1 core left: refused, nothing allocated
        await pipeline.deploy(pod="metrics-pod", count=5, workload=workload)
    assert _allocations() == before + 3
