"""Planning a pod's next batch while the current one commits (eru_allocator.deploy.plan_ahead, docs/pipeline.md
"Performance"), with the real distributor, nats-server, PostgreSQL and sim node agents: batches decided ahead are
submitted (the charged snapshot is what PostgreSQL gives back after the commit), every request completes with its
own decision, and each recorded decision replays to its recorded plan."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

from pipeline_harness import assert_usage_consistent, pipeline_with_sim_nodes

from eru.bus import new_envelope
from eru.decision_answer import full_answer
from eru.domain import Accepted, DeployRequest
from eru.plan_api import solve
from eru.store.decisions import full_input
from eru_allocator.deploy.pipeline import commit_batch
from eru_allocator.deploy.plan_ahead import PodLine
from eru_allocator.deploy.requests import validate
from eru_allocator.flow.batcher import Batcher


def request(index: int) -> DeployRequest:
    workload = {"name": f"w{index % 3}", "image": "busybox", "resources": {"cpu_bind": True, "cpu_request": 0.5}}
    return DeployRequest.model_validate({"request_id": f"ahead-{index}", "pod": "p1", "workload": workload})


async def test_batches_decided_ahead_commit_what_one_after_the_other_would(nats_url: str, postgres_dsn: str) -> None:
    async with pipeline_with_sim_nodes(nats_url, postgres_dsn, count=3, cores=8) as pipe:
        allocator = pipe.allocators[0]
        ctx = replace(allocator.deploy_ctx, line=PodLine())
        batcher: Batcher[Any, Any] = Batcher(
            lambda pod, items: commit_batch(ctx, pod, items), max_batch=6, pipelined=True
        )
        items = [
            (req, validate(req, ctx.config), new_envelope("eru.deploy.request", "test"))
            for req in map(request, range(36))
        ]
        answers = await asyncio.gather(*(batcher.submit("p1", item) for item in items))
        assert [a for a in answers if not isinstance(a, Accepted)] == []
        assert batcher.batches == 6
        assert ctx.line.ahead_used >= 1, (ctx.line.ahead_used, ctx.line.ahead_missed)
        assert ctx.line.ahead_missed == 0  # nothing else changed the pod: every plan made ahead held
        deploy_ids = [answer.deploy_id for answer in answers if isinstance(answer, Accepted)]
        for deploy_id in deploy_ids:
            assert (await pipe.terminal(deploy_id)).kind == "completed"
        rows = await pipe.pool.fetch(
            "SELECT d.result, c.input, c.output FROM deploys d JOIN decisions c ON c.id = d.result->>'decision_id'"
            " WHERE d.id = ANY($1::text[])",
            deploy_ids,
        )
        assert len(rows) == 36
        for row in rows:
            problem = await full_input(pipe.pool, json.loads(row["input"]))
            assert solve(problem) == full_answer(problem, json.loads(row["output"]))  # each replays as made
        assert (
            await pipe.pool.fetchval("SELECT count(*) FROM containers WHERE deploy_id = ANY($1::text[])", deploy_ids)
            == 36
        )
        await assert_usage_consistent(pipe.pool)
