"""Batch workloads are placed against each node's batch (reclaimed) capacity from the eviction service's condition
(docs/colocation.md); prod is not; the batch decisions replay with `eru replay`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

import pytest
import pytest_asyncio
from pipeline_harness import Pipeline, ScriptedNodeAgent, ScriptedPipeline

from eru.bus import RemoteError, new_envelope, publish
from eru.bus.subjects import node_condition
from eru.domain import NodeCondition
from eru.domain.messages import ReallocRequest
from eru.store.decisions import decision_input

GiB = 1 << 30


@pytest_asyncio.fixture
async def pipeline(scripted_pipeline: ScriptedPipeline) -> Pipeline:
    pipe, _ = await scripted_pipeline({name: {"cores": 4, "memory": 8 * GiB} for name in ("n1", "n2")})
    return pipe


def _workload(name: str, priority_class: str, cpu: float = 1) -> dict[str, Any]:
    resources = {"cpu_bind": True, "cpu_request": cpu, "memory_request": GiB}
    return {"name": name, "image": "busybox", "priority_class": priority_class, "resources": resources}


async def _replay(pipeline: Pipeline, decision_id: str) -> dict[str, Any]:
    where = ["--database", pipeline.dsn, "--nats", pipeline.nats_url]
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "eru.cli", "replay", decision_id, *where, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


async def _per_node(pipeline: Pipeline, deploy_id: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in await pipeline.containers(deploy_id=deploy_id):
        counts[row["node"]] = counts.get(row["node"], 0) + 1
    return counts


async def test_batch_is_capped_by_the_allowance_prod_is_not_and_both_replay(pipeline: Pipeline) -> None:
    condition = NodeCondition(node="n1", time=time.time(), batch_cpu_capacity=1.5, batch_memory_capacity=6 * GiB)
    await publish(pipeline.js, node_condition("n1"), condition, new_envelope("eru.node.condition", "eviction/test"))
    stored = "SELECT (conditions->>'batch_cpu_capacity')::float8 FROM node_status WHERE name = 'n1'"
    await pipeline.wait_for(lambda: pipeline.pool.fetchval(stored), 1.5)

    # 1.5 batch cores on n1 admit one 1-core instance; n2 (no condition yet) takes the rest on its free cores
    batch = await pipeline.deploy(count=5, mode="auto", workload=_workload("crunch", "batch"))
    planned = await pipeline.terminal(batch)
    assert planned.kind == "completed"
    assert await _per_node(pipeline, batch) == {"n1": 1, "n2": 4}
    decision_id = next(e.decision_id for e in pipeline.events[batch] if e.kind == "planned")
    assert decision_id is not None
    problem = await decision_input(pipeline.pool, decision_id)
    assert problem is not None
    assert problem["priority_class"] == "batch"
    assert {node["name"]: node.get("batch") for node in problem["nodes"]} == {
        "n1": {"cpu": 1.5, "memory": 6 * GiB},
        "n2": None,
    }
    output = json.loads(await pipeline.pool.fetchval("SELECT output FROM decisions WHERE id = $1", decision_id))
    assert output["capacity"] == {"n1": 1, "n2": 4}
    assert await _replay(pipeline, decision_id) == {
        "schema": "eru.cli/replay",
        "schema_version": 1,
        "decision_id": decision_id,
        "kind": "deploy",
        "same": True,
        "differences": [],
    }

    # the instance placed after the condition counts against it (0.5 core left): n1 has free cores but no batch room
    with pytest.raises(RemoteError) as refused:
        await pipeline.deploy(count=1, mode="auto", workload=_workload("more", "batch"))
    assert refused.value.code == "insufficient_capacity"
    assert "batch_cpu on 1 node" in refused.value.message
    n1 = refused.value.details["resources"]["n1"]
    assert n1["limited_by"] == "batch_cpu"
    assert n1["batch_allowance"]["cpu"] == 0.5
    assert n1["ordinary_capacity"] == 3
    failed_decision = await pipeline.pool.fetchval(
        "SELECT result->>'decision_id' FROM deploys WHERE id = $1", refused.value.details["deploy_id"]
    )
    assert (await _replay(pipeline, failed_decision))["same"] is True

    # prod ignores the allowance: n1's three free cores all take prod instances
    prod = await pipeline.deploy(count=3, mode="auto", workload=_workload("web", "prod"))
    assert (await pipeline.terminal(prod)).kind == "completed"
    assert await _per_node(pipeline, prod) == {"n1": 3}
    prod_decision = next(e.decision_id for e in pipeline.events[prod] if e.kind == "planned")
    prod_input = await decision_input(pipeline.pool, prod_decision)
    assert prod_input is not None
    assert "priority_class" not in prod_input


async def test_a_newer_condition_replaces_the_allowance(pipeline: Pipeline) -> None:
    for capacity, at in ((0.0, time.time()), (2.0, time.time() + 1)):
        condition = NodeCondition(node="n1", time=at, batch_cpu_capacity=capacity, batch_memory_capacity=8 * GiB)
        await publish(pipeline.js, node_condition("n1"), condition, new_envelope("eru.node.condition", "eviction/t"))
    stored = "SELECT (conditions->>'batch_cpu_capacity')::float8 FROM node_status WHERE name = 'n1'"
    await pipeline.wait_for(lambda: pipeline.pool.fetchval(stored), 2.0)
    batch = await pipeline.deploy(count=2, mode="each", workload=_workload("crunch", "batch", cpu=1))
    assert (await pipeline.terminal(batch)).kind == "completed"
    assert await _per_node(pipeline, batch) == {"n1": 2, "n2": 2}


async def _condition(pipeline: Pipeline, node: str, cpu: float, at: float) -> None:
    condition = NodeCondition(node=node, time=at, batch_cpu_capacity=cpu, batch_memory_capacity=8 * GiB)
    await publish(pipeline.js, node_condition(node), condition, new_envelope("eru.node.condition", "eviction/test"))
    stored = f"SELECT (conditions->>'time')::float8 FROM node_status WHERE name = '{node}'"
    await pipeline.wait_for(lambda: pipeline.pool.fetchval(stored), at)


async def test_concurrent_batch_requests_keep_to_the_allowance(pipeline: Pipeline) -> None:
    now = time.time()
    await _condition(pipeline, "n1", 1.5, now)
    await _condition(pipeline, "n2", 0.0, now)

    async def send(index: int) -> str:
        try:
            await pipeline.deploy(within=30, count=1, workload=_workload(f"job{index}", "batch"))
        except RemoteError as error:
            return error.code
        return "accepted"

    answers = await asyncio.gather(*(send(index) for index in range(4)))
    assert sorted(answers) == ["accepted", "insufficient_capacity", "insufficient_capacity", "insufficient_capacity"]
    assert [row["node"] for row in await pipeline.containers(**{"class": "batch"})] == ["n1"]


async def test_a_waiting_batch_request_goes_in_when_the_allowance_grows(pipeline: Pipeline) -> None:
    now = time.time()
    await _condition(pipeline, "n1", 0.0, now)
    await _condition(pipeline, "n2", 0.0, now)
    waiting = await pipeline.deploy(count=2, mode="auto", workload=_workload("crunch", "batch"), wait_seconds=30)
    reason = "SELECT reason->>'code' FROM deploy_waits WHERE deploy_id = $1"
    await pipeline.wait_for(lambda: pipeline.pool.fetchval(reason, waiting), "insufficient_capacity")
    assert not await pipeline.containers(deploy_id=waiting)

    await _condition(pipeline, "n1", 2.0, now + 1)  # the eviction service reclaimed two cores on n1
    done = await pipeline.terminal(waiting, within=4)  # woken by the condition, not the 5 s safety-net poll
    assert done.kind == "completed"
    assert done.placements == {"n1": 2}


async def test_a_batch_realloc_grows_only_into_the_allowance_and_replays(pipeline: Pipeline) -> None:
    now = time.time()
    await _condition(pipeline, "n1", 1.5, now)
    await _condition(pipeline, "n2", 0.0, now)
    batch = await pipeline.deploy(count=1, workload=_workload("crunch", "batch"))
    (cid,) = (await pipeline.terminal(batch)).started
    assert await _per_node(pipeline, batch) == {"n1": 1}

    with pytest.raises(RemoteError) as refused:  # 0.5 core of allowance left on n1 (3 cores are free)
        await pipeline.op("realloc", ReallocRequest(container_ids=[cid], cpu_request=1))
    assert "batch allowance is 0.5 cores" in refused.value.message
    assert not await pipeline.pool.fetchval("SELECT count(*) FROM decisions WHERE kind = 'realloc'")  # rolled back

    reply = await pipeline.op("realloc", ReallocRequest(container_ids=[cid], cpu_request=0.5))
    assert [row["id"] for row in reply.rows] == [cid]
    decision = await pipeline.pool.fetchrow("SELECT id, input FROM decisions WHERE kind = 'realloc'")
    problem = json.loads(decision["input"])
    assert problem["priority_class"] == "batch"
    assert problem["node"]["batch"] == {"cpu": 0.5, "memory": 8 * GiB - GiB}  # less the instance placed since
    assert (await _replay(pipeline, decision["id"]))["same"] is True


async def test_an_instance_still_being_created_counts_against_a_newer_condition(
    nats_url: str, postgres_dsn: str
) -> None:
    pipe = Pipeline(nats_url, postgres_dsn)
    await pipe.start()
    # the agent never reports the start of "slow": it stays planned (no sample can count it)
    agent = ScriptedNodeAgent(
        pipe.nc, silent=lambda command: bool(command.spec and command.spec.workload.name == "slow")
    )
    await agent.start()
    try:
        for name in ("n1", "n2"):
            await pipe.register(name, cores=4, memory=8 * GiB)
        now = time.time()
        await _condition(pipe, "n1", 1.5, now)
        await _condition(pipe, "n2", 0.0, now)
        creating = await pipe.deploy(count=1, workload=_workload("slow", "batch"))
        assert [row["state"] for row in await pipe.containers(deploy_id=creating)] == ["planned"]
        # a newer condition, published after the instance was created, that has not seen it
        await _condition(pipe, "n1", 1.5, time.time() + 1)
        with pytest.raises(RemoteError) as refused:
            await pipe.deploy(count=1, workload=_workload("next", "batch"))
        assert refused.value.details["resources"]["n1"]["batch_allowance"]["cpu"] == 0.5
    finally:
        await agent.stop()
        await pipe.close()
