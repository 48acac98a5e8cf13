"""`eru replay` on a real deploy's decision: it reproduces; a tampered record is reported as different."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest_asyncio
from pipeline_harness import Pipeline, ScriptedPipeline

from eru.decision_answer import full_answer, is_compact
from eru.plan_api import solve
from eru.store.decisions import full_input


@pytest_asyncio.fixture
async def pipeline(scripted_pipeline: ScriptedPipeline) -> Pipeline:
    pipe, _ = await scripted_pipeline({"n1": {"cores": 6}, "n2": {"cores": 6}})
    return pipe


async def _replay(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "eru.cli", "replay", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_a_real_deploy_decision_replays_and_a_tampered_one_differs(pipeline: Pipeline) -> None:
    workload = {"name": "web", "image": "busybox", "resources": {"cpu_bind": True, "cpu_request": 1.3}}
    deploy_id = await pipeline.deploy(count=5, mode="auto", workload=workload)
    assert (await pipeline.terminal(deploy_id)).kind == "completed"
    planned = next(e for e in pipeline.events[deploy_id] if e.kind == "planned")
    assert planned.decision_id is not None
    where = ["--database", pipeline.dsn, "--nats", pipeline.nats_url]

    same = await _replay(planned.decision_id, *where)
    assert same.returncode == 0, same.stdout + same.stderr
    assert json.loads(same.stdout) == {
        "schema": "eru.cli/replay",
        "schema_version": 1,
        "decision_id": planned.decision_id,
        "kind": "deploy",
        "same": True,
        "differences": [],
    }
    # the record names the batch's nodes; their snapshot is stored once, in the same transaction (docs/replay.md)
    stored = json.loads(await pipeline.pool.fetchval("SELECT input FROM decisions WHERE id = $1", planned.decision_id))
    assert all(isinstance(node, str) for node in stored["nodes"])
    same_time = await pipeline.pool.fetchval(
        "SELECT s.created_at = d.created_at FROM decision_snapshots s, decisions d WHERE s.id = $1 AND d.id = $2",
        stored["snapshot"],
        planned.decision_id,
    )
    assert same_time is True

    output = json.loads(await pipeline.pool.fetchval("SELECT output FROM decisions WHERE id = $1", planned.decision_id))
    first = output["containers"][0]
    first["cpu_map"] = {core: pieces for core, pieces in reversed(list(first["cpu_map"].items()))}
    first["node"] = "n2" if first["node"] == "n1" else "n1"
    await pipeline.pool.execute(
        "UPDATE decisions SET output = $2::jsonb WHERE id = $1", planned.decision_id, json.dumps(output)
    )
    changed = await _replay(planned.decision_id, *where)
    assert changed.returncode == 1
    report = json.loads(changed.stdout)
    assert report["same"] is False
    assert any(d.startswith("containers[0].node") for d in report["differences"])

    missing = await _replay("no-such-decision", *where)
    assert missing.returncode == 4  # not found (docs/cli.md "Exit codes")
    error = json.loads(missing.stdout)["error"]  # --json: the failure is the eru.cli/error document (docs/cli.md)
    assert (error["kind"], error["field"]) == ("not_found", "ID")
    assert "nothing recorded under 'no-such-decision'" in error["message"]


async def test_a_realloc_group_decision_replays(pipeline: Pipeline) -> None:
    from eru.domain.messages import ReallocRequest

    workload = {"name": "db", "image": "pg", "resources": {"cpu_bind": True, "cpu_request": 1}}
    deploy_id = await pipeline.deploy(count=2, mode="drained", workload=workload)
    done = await pipeline.terminal(deploy_id)
    assert done.kind == "completed"
    reply = await pipeline.op("realloc", ReallocRequest(container_ids=done.started, cpu_request=0.5))
    assert len(reply.rows) == 2
    row = await pipeline.pool.fetchrow("SELECT id, input FROM decisions WHERE kind = 'realloc'")
    assert len(json.loads(row["input"])["origins"]) == 2  # both containers on one node: one group decision
    same = await _replay(row["id"], "--database", pipeline.dsn, "--nats", pipeline.nats_url)
    assert same.returncode == 0, same.stdout + same.stderr
    assert json.loads(same.stdout)["kind"] == "realloc"


async def _eru(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "eru.cli", *args], capture_output=True, text=True, timeout=60
    )


async def test_an_answer_recorded_for_the_node_placed_on_replays_and_explains_every_node(pipeline: Pipeline) -> None:
    # docs/replay.md "A decision's answer, the nodes placed on": one instance goes to one of the two nodes; the
    # record lists that node's capacity only, and every reader puts the other's back from the recorded input
    workload = {"name": "one", "image": "busybox", "resources": {"cpu_bind": True, "cpu_request": 1}}
    deploy_id = await pipeline.deploy(count=1, mode="auto", workload=workload)
    assert (await pipeline.terminal(deploy_id)).kind == "completed"
    planned = next(e for e in pipeline.events[deploy_id] if e.kind == "planned")
    assert planned.decision_id is not None
    row = await pipeline.pool.fetchrow("SELECT input, output FROM decisions WHERE id = $1", planned.decision_id)
    stored = json.loads(row["output"])
    (placed,) = stored["deploy"]
    assert is_compact(stored)
    assert set(stored["capacity"]) == {placed}
    problem = await full_input(pipeline.pool, json.loads(row["input"]))
    full = solve(problem)  # what `eru plan` prints for the recorded input
    assert set(full["capacity"]) == {"n1", "n2"}
    assert full_answer(problem, stored) == full

    where = ["--database", pipeline.dsn, "--nats", pipeline.nats_url]
    same = await _replay(planned.decision_id, *where)
    assert same.returncode == 0, same.stdout + same.stderr
    assert json.loads(same.stdout)["same"] is True

    explained = await _eru("explain", planned.decision_id, *where, "-o", "json")
    assert explained.returncode == 0, explained.stderr
    doc = json.loads(explained.stdout)
    (other,) = {"n1", "n2"} - {placed}
    assert [(e["node"], e["capacity"]) for e in doc["placed"]] == [(placed, full["capacity"][placed])]
    assert [(e["node"], e["capacity"]) for e in doc["not_chosen"]] == [(other, full["capacity"][other])]
