"""Deploys through the real pipeline (allocator + distributor + outbox relay + JetStream + PostgreSQL)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from pipeline_harness import (
    Pipeline,
    ScriptedNodeAgent,
    ScriptedPipeline,
    assert_usage_consistent,
    pipeline_with_scripted_agent,
    pipeline_with_sim_nodes,
)

from eru.replay import RecordedDecision, replay
from eru.store.decisions import full_input


@pytest_asyncio.fixture
async def sim_pipeline(nats_url: str, postgres_dsn: str) -> AsyncIterator[Pipeline]:
    """The pipeline with the real node agent (sim runtime) serving sim-001 … sim-003 (4 cores, 8 GiB each)."""
    async with pipeline_with_sim_nodes(nats_url, postgres_dsn, count=3) as pipe:
        yield pipe


@pytest_asyncio.fixture
async def pipeline(scripted_pipeline: ScriptedPipeline) -> Pipeline:
    """The pipeline with a scripted node agent that fails containers of images containing 'bad'."""
    pipe, _ = await scripted_pipeline(
        ("n1", "n2", "n3"), fail=lambda c: "image pull failed" if c.spec and "bad" in c.spec.workload.image else None
    )
    return pipe


def workload(name: str = "web", image: str = "busybox", **resources: Any) -> dict[str, Any]:
    return {"name": name, "image": image, "resources": resources}


async def test_auto_deploy_runs_every_container_and_charges_nodes(sim_pipeline: Pipeline) -> None:
    pipeline = sim_pipeline
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
    problem = await full_input(pipeline.pool, json.loads(decision["input"]))
    assert [n["name"] for n in problem["nodes"]] == ["sim-001", "sim-002", "sim-003"]
    assert json.loads(decision["output"])["deploy"] == planned.placements
    recorded = RecordedDecision(planned.decision_id or "", "deploy", problem, json.loads(decision["output"]))
    replayed = replay(recorded)  # the recorded input re-runs through the pure planner to the same answer
    assert replayed.differences == []
    assert replayed.same


async def test_each_fill_drained_and_global_modes(sim_pipeline: Pipeline) -> None:
    pipeline = sim_pipeline
    each = await pipeline.deploy(count=2, mode="each", workload=workload("each", cpu_bind=True, cpu_request=1))
    assert (await pipeline.terminal(each)).kind == "completed"
    assert _planned(pipeline, each) == {"sim-001": 2, "sim-002": 2, "sim-003": 2}

    first = await pipeline.deploy(count=1, mode="auto", workload=workload("filler", memory_request="1GiB"))
    await pipeline.terminal(first)
    fill = await pipeline.deploy(count=3, mode="fill", workload=workload("filler", memory_request="1GiB"))
    assert (await pipeline.terminal(fill)).kind == "completed"
    assert sum(_planned(pipeline, fill).values()) == 8  # every node topped up to 3, one already had 1

    drained = await pipeline.deploy(count=3, mode="drained", workload=workload("packed", cpu_bind=True, cpu_request=1))
    assert (await pipeline.terminal(drained)).kind == "completed"
    assert _planned(pipeline, drained) == {
        "sim-001": 2,
        "sim-002": 1,
    }  # equal capacities: input order, each node filled

    spread = await pipeline.deploy(count=3, mode="global", workload=workload("spread", memory_request="256MiB"))
    assert (await pipeline.terminal(spread)).kind == "completed"
    assert sum(_planned(pipeline, spread).values()) == 3

    scored = await pipeline.deploy(
        count=4,
        mode="score",
        options={"scorers": {"least-allocated": 1, "qos-balance": 1}},
        workload=workload("scored", cpu_request=0.5, cpu_limit=0.5, memory_request="64MiB", memory_limit="64MiB"),
    )
    assert (await pipeline.terminal(scored)).kind == "completed"
    assert sum(_planned(pipeline, scored).values()) == 4
    planned = next(e for e in pipeline.events[scored] if e.kind == "planned")
    row = await pipeline.pool.fetchrow("SELECT input, output FROM decisions WHERE id = $1", planned.decision_id)
    recorded = await full_input(pipeline.pool, json.loads(row["input"]))
    assert recorded["options"]["qos_class"] == "Guaranteed"
    assert set(recorded["options"]["nodes"]) == {"sim-001", "sim-002", "sim-003"}  # the scorers saw real resources
    assert replay(RecordedDecision(str(planned.decision_id), "deploy", recorded, json.loads(row["output"]))).same
    await assert_usage_consistent(pipeline.pool)


def _planned(pipeline: Pipeline, deploy_id: str) -> dict[str, int]:
    return next(e for e in pipeline.events[deploy_id] if e.kind == "planned").placements


async def test_failed_containers_make_a_partial_deploy_and_return_resources(pipeline: Pipeline) -> None:
    ok = await pipeline.deploy(count=1, mode="each", workload=workload("web", cpu_bind=True, cpu_request=2))
    assert (await pipeline.terminal(ok)).kind == "completed"
    bad = await pipeline.deploy(
        count=3, mode="auto", workload=workload("web2", image="bad:1", cpu_bind=True, cpu_request=1)
    )
    done = await pipeline.terminal(bad)
    assert done.kind == "failed"
    assert set(done.failed.values()) == {"image pull failed"}
    await assert_usage_consistent(pipeline.pool)
    used = await pipeline.pool.fetch("SELECT used_cpu_map FROM nodes ORDER BY name")
    assert [sum(json.loads(r["used_cpu_map"]).values()) for r in used] == [200, 200, 200]


async def test_partial_when_some_containers_fail(nats_url: str, postgres_dsn: str) -> None:
    pipe = Pipeline(nats_url, postgres_dsn)
    await pipe.start()
    agent = ScriptedNodeAgent(pipe.nc, fail=lambda c: "no space left on device" if c.node == "n2" else None)
    await agent.start()
    try:
        for name in ("n1", "n2", "n3"):
            await pipe.register(name)
        deploy_id = await pipe.deploy(count=6, mode="auto", workload=workload(cpu_bind=True, cpu_request=1.5))
        done = await pipe.terminal(deploy_id)
        assert done.kind == "partial"
        assert len(done.started) == 4
        assert len(done.failed) == 2
        assert set(done.failed.values()) == {"no space left on device"}
        await assert_usage_consistent(pipe.pool)
        n2 = await pipe.pool.fetchrow("SELECT used_cpu_map, used_memory FROM nodes WHERE name = 'n2'")
        assert json.loads(n2["used_cpu_map"]) == {}
        status = await pipe.pool.fetchval("SELECT status FROM deploys WHERE id = $1", deploy_id)
        assert status == "partial"
    finally:
        await agent.stop()
        await pipe.close()


async def test_containers_no_agent_answers_for_fail_and_a_late_start_is_removed(
    nats_url: str, postgres_dsn: str
) -> None:
    pipe = Pipeline(nats_url, postgres_dsn)
    await pipe.start(pending_timeout_seconds=1.0, sweep_interval_seconds=0.2)
    agent = ScriptedNodeAgent(pipe.nc, silent=lambda c: c.node == "n2" and c.kind == "create")
    await agent.start()
    try:
        for name in ("n1", "n2"):
            await pipe.register(name)
        deploy_id = await pipe.deploy(count=4, mode="each", workload=workload(cpu_bind=True, cpu_request=1))
        done = await pipe.terminal(deploy_id)
        assert done.kind == "partial"
        assert len(done.started) == 4
        assert set(done.failed.values()) == {"no answer from node n2 within 1s"}
        progress = [e for e in pipe.events[deploy_id] if e.kind == "progress"]
        assert progress  # the n1 containers were announced while n2's were still pending
        assert sorted(c for e in progress for c in e.started) == sorted(done.started)
        assert all(not e.failed for e in progress)
        await assert_usage_consistent(pipe.pool)
        n2 = await pipe.pool.fetchval("SELECT used_cpu_map FROM nodes WHERE name = 'n2'")
        assert json.loads(n2) == {}

        late = next(c for c in agent.commands if c.node == "n2" and c.kind == "create")
        await agent.answer(late)  # the agent comes back and reports the container started after all

        async def removal_sent() -> bool:
            return any(c.kind == "remove" and c.container_id == late.container_id for c in agent.commands)

        await pipe.wait_for(removal_sent, True, within=10)
        assert await pipe.pool.fetchval("SELECT state FROM containers WHERE id = $1", late.container_id) == "failed"
        await assert_usage_consistent(pipe.pool)
    finally:
        await agent.stop()
        await pipe.close()


async def test_a_deploys_containers_on_one_node_travel_as_one_batch_and_one_answer(
    nats_url: str, postgres_dsn: str
) -> None:
    fail_n2 = {"fail": lambda c: "image pull failed" if c.spec and c.node == "n2" else None}
    async with pipeline_with_scripted_agent(nats_url, postgres_dsn, batched=True, **fail_n2) as (pipe, agent):
        deploy_id = await pipe.deploy(count=2, mode="each", workload=workload(cpu_bind=True, cpu_request=1))
        done = await pipe.terminal(deploy_id)
        # one message per node, each answered by one ContainerEvents: the two of n2 failed, the others run
        assert sorted(agent.subjects) == ["eru.node.n1.cmd.batch", "eru.node.n2.cmd.batch", "eru.node.n3.cmd.batch"]
        assert done.kind == "partial"
        assert (len(done.started), len(done.failed)) == (4, 2)
        rows = await pipe.containers(deploy_id=deploy_id)
        assert sorted((r["node"], r["state"]) for r in rows) == [
            ("n1", "running"),
            ("n1", "running"),
            ("n2", "failed"),
            ("n2", "failed"),
            ("n3", "running"),
            ("n3", "running"),
        ]
        # a batch is applied in one transaction, marked once in the inbox (a redelivery applies nothing twice)
        marks = await pipe.pool.fetch("SELECT message_id FROM inbox WHERE consumer = 'allocator-container-events'")
        assert sorted(m["message_id"] for m in marks) == sorted(agent.batch_ids)
        await assert_usage_consistent(pipe.pool)
        # a lone container on a node still goes as a plain create
        single = await pipe.deploy(count=1, mode="auto", workload=workload("one", cpu_request=0.5))
        assert (await pipe.terminal(single)).kind == "completed"
        assert agent.subjects[-1].endswith(".cmd.create")
