"""`eru status` shows a service `degraded` when a consumer has redeliveries, an old backlog or recent dead letters,
with the counts (docs/operations.md "Degraded") — read from a real nats-server under a real allocator."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest_asyncio
from pipeline_harness import Pipeline, ScriptedNodeAgent, ScriptedPipeline

from eru.bus import new_envelope, publish
from eru.bus.codec import JSON
from eru.bus.consumer_health import Thresholds, gather
from eru.bus.envelope import H_CONTENT_TYPE
from eru.bus.subjects import DEPLOY_REQUEST
from eru.domain import DeployRequest
from eru_allocator.app import DEPLOY_CONSUMER


@pytest_asyncio.fixture
async def pipeline(scripted_pipeline: ScriptedPipeline) -> tuple[Pipeline, ScriptedNodeAgent]:
    # deploys are retried (redelivered) until a distributor answers
    return await scripted_pipeline(("n1",), start={"distributor": False})


async def deploy_entry(pipe: Pipeline, thresholds: Thresholds | None = None) -> dict[str, Any]:
    entries = await gather(pipe.js, thresholds or Thresholds())
    return next(e for e in entries if e["name"] == DEPLOY_CONSUMER)


async def test_a_healthy_consumer_is_ok_and_a_dead_letter_degrades_it(
    pipeline: tuple[Pipeline, ScriptedNodeAgent],
) -> None:
    pipe, _agent = pipeline
    assert (await deploy_entry(pipe))["state"] == "ok"
    headers = {**new_envelope("t", "test").to_headers(), H_CONTENT_TYPE: JSON}
    await pipe.js.publish(DEPLOY_REQUEST, b"[" * 100 + b"]" * 100, headers=headers)

    async def dead_lettered() -> int:
        count: int = (await deploy_entry(pipe))["dead_lettered_recently"]
        return count

    await pipe.wait_for(dead_lettered, 1)
    entry = await deploy_entry(pipe)
    assert entry["state"] == "degraded"
    assert entry["reasons"] == ["1 dead-lettered in the last 60s"]
    status = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "eru.cli", "status", "--json", "--nats", pipe.nats_url, "--timeout", "0.5"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    doc = json.loads(status.stdout)
    allocator = next(s for s in doc["services"] if s["name"] == "allocator")
    shown = next(c for c in allocator["consumers"] if c["name"] == DEPLOY_CONSUMER)
    assert shown["state"] == "degraded"
    assert shown["dead_lettered_recently"] == 1


async def test_redeliveries_and_an_old_backlog_degrade_it(pipeline: tuple[Pipeline, ScriptedNodeAgent]) -> None:
    pipe, _agent = pipeline
    request = DeployRequest.model_validate({"pod": "p1", "workload": {"name": "web", "image": "busybox"}})
    await publish(pipe.js, DEPLOY_REQUEST, request, new_envelope("eru.deploy.request", "test"))

    async def redelivered() -> bool:
        entry = await deploy_entry(pipe, Thresholds(backlog_seconds=0.5))
        return entry["redelivered"] > 0 and any(r.startswith("backlog 1 messages") for r in entry["reasons"])

    # no distributor: the request is nakked and comes back; it is the oldest unacknowledged message
    await pipe.wait_for(redelivered, True, within=20.0)
    entry = await deploy_entry(pipe, Thresholds(backlog_seconds=0.5))
    assert entry["state"] == "degraded"
    assert entry["reasons"][0].endswith("redelivered")
