"""One decision, every entry point (docs/pipeline.md "The decision"): the decision records of real deploys through
the running allocator (real NATS, PostgreSQL, distributor) give the same plans through `eru plan` (the plan API),
`eru.planning.decide`, the simulator's `plan_deploy` and `eru replay`.

With `ERU_RECORD_DECISIONS=<file>` the records are also written there: that is how
tests/fixtures/decisions.json (the unit test's recorded inputs) was made.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from pipeline_harness import Pipeline, ScriptedPipeline

from eru.bus.errors import RemoteError
from eru.decision_answer import full_answer, is_compact
from eru.plan_api import deploy_problem, solve
from eru.planning import plan_deploy
from eru.planning.decide import decide
from eru.replay import RecordedDecision, replay
from eru.store.decisions import full_input


@pytest_asyncio.fixture
async def pipeline(scripted_pipeline: ScriptedPipeline) -> Pipeline:
    pipe, _ = await scripted_pipeline({"n1": {"cores": 6}, "n2": {"cores": 4}, "n3": {"cores": 8}})
    return pipe


def _workload(name: str, **resources: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox", "resources": resources}


async def test_recorded_decisions_give_the_same_plan_through_every_entry_point(pipeline: Pipeline) -> None:
    requests = [
        {"count": 5, "mode": "auto", "workload": _workload("web", cpu_bind=True, cpu_request=1.3)},
        {"count": 4, "mode": "score", "workload": _workload("api", cpu_request=0.5, memory_request="1GiB")},
        {"count": 2, "mode": "fill", "workload": _workload("web", cpu_bind=True, cpu_request=0.5)},
        {"count": 3, "mode": "auto", "workload": _workload("web", cpu_bind=True, cpu_request=1.3)},
        {"count": 40, "mode": "auto", "workload": _workload("big", cpu_bind=True, cpu_request=2)},
    ]
    for fields in requests[:-1]:
        deploy_id = await pipeline.deploy(**fields)
        await pipeline.terminal(deploy_id)
    with pytest.raises(RemoteError, match="need 40 new instances"):
        await pipeline.deploy(**requests[-1])  # 40 × 2 bound cores do not fit: refused, and recorded
    rows = await pipeline.pool.fetch(
        "SELECT id, input, output FROM decisions WHERE kind = 'deploy' ORDER BY created_at"
    )
    inputs = [await full_input(pipeline.pool, json.loads(row["input"])) for row in rows]
    stored = [json.loads(row["output"]) for row in rows]
    # a plan's answer names only the nodes placed on; read back, every node's capacity follows from the input
    # (docs/replay.md "A decision's answer, the nodes placed on")
    assert all(set(output["capacity"]) == set(output["deploy"]) for output in stored[:-1])
    recorded = [
        {"id": row["id"], "input": problem, "output": full_answer(problem, output)}
        for row, problem, output in zip(rows, inputs, stored, strict=True)
    ]
    # a plan on some of the nodes is marked so; one on every node (and a refusal) is written whole
    placed_on_some = [len(r["output"].get("capacity", {})) > len(r["output"].get("deploy", {})) for r in recorded]
    assert [is_compact(output) for output in stored] == placed_on_some
    assert placed_on_some.count(True) >= 2
    assert len(recorded) == len(requests)
    assert "error" in recorded[-1]["output"]
    if target := os.environ.get("ERU_RECORD_DECISIONS"):
        await asyncio.to_thread(Path(target).write_text, json.dumps(recorded, indent=1) + "\n")
    for record in recorded:
        problem, output = record["input"], record["output"]
        if "error" in output:
            continue  # the refusal's numbers are compared by `eru replay` below
        assert solve(problem) == output  # `eru plan` and the plan API
        snapshot, ask = deploy_problem(problem)
        assert decide(snapshot, ask).answer() == output
        sim = plan_deploy(
            snapshot.nodes,
            ask.request,
            snapshot.config,
            mode=ask.mode,
            count=ask.count,
            counts=snapshot.workload_counts(ask.workload),
            options=ask.options,
        )
        assert [plan.to_dict() for plan in sim.containers] == output["containers"]  # `eru sim`
    for record, output in zip(recorded, stored, strict=True):
        outcome = replay(RecordedDecision(record["id"], "deploy", record["input"], record["output"]))
        assert outcome.same, outcome.differences
        assert replay(RecordedDecision(record["id"], "deploy", record["input"], output)).same  # as stored
