"""One distributor request per batch of deploy requests (docs/pipeline.md, "Performance"), with the real distributor,
nats-server, PostgreSQL and sim node agents: every request keeps its own reply, decision and events, an invalid
request fails alone, and a batch whose predicted placements the distributor does not confirm is planned again with
one request each, committing the distributor's answers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pipeline_harness import pipeline_with_sim_nodes

from eru.bus import new_envelope
from eru.domain import Accepted, DeployRequest
from eru.errors import EruError, InvalidInput
from eru.planning.distribute import SlotColumns, place_columns
from eru_allocator.deploy import placing
from eru_allocator.deploy.pipeline import commit_batch
from eru_allocator.deploy.requests import validate


def request(index: int, **extra: Any) -> DeployRequest:
    body: dict[str, Any] = {
        "request_id": f"batch-{index}",
        "pod": "p1",
        "count": 1,
        "mode": "auto",
        "workload": {"name": f"w{index % 3}", "image": "busybox", "resources": {"cpu_bind": True, "cpu_request": 0.5}},
    }
    body.update(extra)
    return DeployRequest.model_validate(body)


async def counting(nc: Any, subject: str) -> list[str]:
    """Every request seen on `subject` (a plain subscription beside the distributor's queue group)."""
    seen: list[str] = []

    async def on_message(msg: Any) -> None:
        seen.append(msg.subject)

    await nc.subscribe(subject, cb=on_message)
    await nc.flush()
    return seen


async def run_batch(pipe: Any, requests: list[DeployRequest]) -> list[Accepted | EruError]:
    allocator = pipe.allocators[0]
    items = [(req, validate(req, allocator.config), new_envelope("eru.deploy.request", "test")) for req in requests]
    return await commit_batch(allocator.deploy_ctx, "p1", items)


async def test_a_batch_asks_the_distributor_once_and_an_invalid_request_fails_alone(
    nats_url: str, postgres_dsn: str
) -> None:
    async with pipeline_with_sim_nodes(nats_url, postgres_dsn, count=3) as pipe:
        batched = await counting(pipe.nc, "eru.distributor.place_batch")
        single = await counting(pipe.nc, "eru.distributor.place")
        # request 5 names a scorer that does not exist: valid to the schema, refused by the placement mode
        requests = [request(i) for i in range(12)]
        requests[5] = request(5, mode="score", options={"scorers": {"bogus": 1}})
        answers = await run_batch(pipe, requests)

        bad = answers[5]
        assert isinstance(bad, InvalidInput), bad
        assert bad.field == "options.scorers.bogus", bad.message
        good = [a for i, a in enumerate(answers) if i != 5]
        assert all(isinstance(a, Accepted) for a in good), good
        deploy_ids = [a.deploy_id for a in good if isinstance(a, Accepted)]
        assert len(set(deploy_ids)) == 11
        await pipe.wait_for(lambda: _len(batched), 1)
        assert single == []

        for deploy_id in deploy_ids:
            assert (await pipe.terminal(deploy_id)).kind == "completed"
            kinds = [event.kind for event in pipe.events[deploy_id]]
            assert (kinds[0], kinds[-1]) == ("planned", "completed"), kinds
        # each placed request has its own deploy row and decision; the invalid one left nothing behind
        rows = await pipe.pool.fetch("SELECT id, request_id, result FROM deploys ORDER BY request_id")
        assert sorted(row["request_id"] for row in rows) == sorted(f"batch-{i}" for i in range(12) if i != 5)
        decisions = {json.loads(row["result"])["decision_id"] for row in rows}
        assert len(decisions) == 11
        stored = await pipe.pool.fetchval("SELECT count(*) FROM decisions WHERE id = ANY($1::text[])", list(decisions))
        assert stored == 11
        containers = await pipe.pool.fetch("SELECT state FROM containers")
        assert sorted(row["state"] for row in containers) == ["running"] * 11


async def test_a_batch_the_distributor_answers_otherwise_is_planned_again_request_by_request(
    nats_url: str, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with pipeline_with_sim_nodes(nats_url, postgres_dsn, count=3) as pipe:
        batched = await counting(pipe.nc, "eru.distributor.place_batch")
        single = await counting(pipe.nc, "eru.distributor.place")
        predictions: list[dict[str, int]] = []

        def wrong(mode: str, columns: SlotColumns, count: int, nodes_limit: int, options: Any) -> dict[str, int]:
            # the allocator's prediction puts the instance on the last node, the distributor ("auto") does not
            right = place_columns(mode, columns, count, nodes_limit, options)
            first, last = columns.names[0], columns.names[-1]
            guess = {last: count} if right != {last: count} else {first: count}
            predictions.append(guess)
            return guess

        monkeypatch.setattr(placing, "place_columns", wrong)
        answers = await run_batch(pipe, [request(i) for i in range(4)])

        assert all(isinstance(a, Accepted) for a in answers), answers
        assert len(batched) == 1
        # decided again without the pod's lock: the first request's ask is the one the batch asked (its answer
        # kept), each later one is new (the instance before it went elsewhere) and asked alone
        assert len(single) == 3
        assert len(predictions) == 4
        # what was committed is the distributor's placement, and each decision records it
        for answer in answers:
            assert isinstance(answer, Accepted)
            assert (await pipe.terminal(answer.deploy_id)).kind == "completed"
        rows = await pipe.pool.fetch("SELECT result FROM deploys ORDER BY request_id")
        placed = [json.loads(row["result"])["placements"] for row in rows]
        assert placed != predictions
        outputs = await pipe.pool.fetch(
            "SELECT output FROM decisions WHERE id = ANY($1::text[])",
            [json.loads(row["result"])["decision_id"] for row in rows],
        )
        assert len(outputs) == 4


async def _len(items: list[str]) -> int:
    return len(items)
