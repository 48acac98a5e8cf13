"""Issue 18 end to end on real services: sim node agents whose prod load follows a trace, a real eviction replica,
real allocator(s): a kept batch deploy is evicted within its budget (the other victim is refused, the node only
suppressed), the evicted instance is placed again by eru — not on the node that evicted it (back-off) — and the
kill-path metrics count it all."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from colocation_harness import eviction_replica, sim_node
from pipeline_harness import Pipeline
from prometheus_client import REGISTRY

from eru.bus.codec import decode
from eru.domain import EvictionDecision
from eru.nodeagent.load import LOAD_LABEL
from eru.plan_api import solve
from eru.replay import recorded_eviction, replay
from eru.store.decisions import full_input
from eru_eviction.budgets import BUCKET

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

GiB = 1 << 30
# 1 s samples and a short window; reservations stay at the request (start-up) for the whole test
WATERMARKS: dict[str, Any] = {
    "window_seconds": 4,
    "metrics_interval_seconds": 1,
    "cpu_cooldown_seconds": 1,
    "reservation_startup_seconds": 600,
    "room_horizon_seconds": 30,
}
# Re-placement after 0.5 s × 2^k (the default is 30 s): the test waits for seconds, not minutes.
KEEP = {"replace_base_seconds": 0.5, "replace_max_delay_seconds": 5}


def _workload(name: str, priority_class: str, cpu: float, load: dict[str, Any], **extra: Any) -> dict[str, Any]:
    resources = {"cpu_bind": priority_class == "batch", "cpu_request": cpu, "memory_request": GiB}
    labels = {LOAD_LABEL: json.dumps(load)}
    return {
        "name": name,
        "image": "sim",
        "priority_class": priority_class,
        "resources": resources,
        "labels": labels,
        **extra,
    }


def _metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_kept_batch_is_evicted_within_budget_and_placed_again_away_from_the_node(
    nats_url: str, postgres_dsn: str
) -> None:
    pipeline = Pipeline(nats_url, postgres_dsn)
    await pipeline.start(keep=KEEP, keep_interval_seconds=0.3)
    decisions: list[EvictionDecision] = []
    both = asyncio.Event()  # an eviction and a budget refusal were published

    async def on_decision(msg: Any) -> None:
        decisions.append(decode(msg.data, EvictionDecision))
        if any(d.kind == "evict" for d in decisions) and any(d.refused for d in decisions):
            both.set()

    await pipeline.nc.subscribe("eru.eviction.*", cb=on_decision)
    evicted_before = _metric(
        "eru_colocation_evictions_total", reason="cpu-satisfaction", node="sim-a", workload="crunch"
    )
    refused_before = _metric("eru_colocation_budget_refusals_total", workload="crunch")
    replaced_before = _metric("eru_colocation_replacements_total", workload="crunch")
    try:
        async with sim_node(pipeline, "sim-a"), eviction_replica(nats_url, WATERMARKS):
            await pipeline.wait_for(lambda: pipeline.pool.fetchval("SELECT count(*) FROM nodes"), 1)
            # prod on sim-a: 1 core for 12 s, then 7.6 of the 8 cores (its trace) — above the evict watermark
            trace = {"kind": "step", "steps": [{"at": 0, "cpu": 1.0}, {"at": 12, "cpu": 7.6}]}
            prod = await pipeline.deploy(count=1, workload=_workload("web", "prod", 1, trace))
            assert (await pipeline.terminal(prod)).kind == "completed"
            busy = {"kind": "constant", "cpu": 1.0}
            budget = {"max_unavailable": 1, "window_seconds": 600}
            kept = await pipeline.deploy(
                count=2, keep=True, workload=_workload("crunch", "batch", 1, busy, eviction_budget=budget)
            )
            assert (await pipeline.terminal(kept)).kind == "completed"
            async with sim_node(pipeline, "sim-b"):
                # the load comes: one instance is evicted (budget 1 per 10 min), the other is refused
                await asyncio.wait_for(both.wait(), 60)
                evict = next(d for d in decisions if d.kind == "evict")
                assert len(evict.victims) == 1
                victim = evict.victims[0]
                assert (victim.workload, victim.budget_left, victim.evictions) == ("crunch", 0, 0)
                refusal = next(d for d in decisions if d.refused)
                assert refusal.refused[0].rule == "budget"
                assert refusal.refused[0].container_id != victim.container_id
                assert "only suppressed" in str(refusal.numbers.get("action", "")) or refusal.kind == "evict"

                # both decisions replay from their recorded input: the eviction and the refusal
                assert replay(recorded_eviction(evict.model_dump(mode="json"))).same
                assert replay(recorded_eviction(refusal.model_dump(mode="json"))).same
                kv = await pipeline.js.key_value(BUCKET)
                recorded = json.loads((await kv.get("p1.crunch")).value)["evictions"]
                assert [cid for _, cid in recorded] == [victim.container_id]

                # eru places the evicted instance again, through a deploy of its own, away from sim-a
                running = "SELECT container_id FROM kept_instances WHERE lineage = $1 AND state = 'running'"
                async with asyncio.timeout(60):
                    while True:
                        current = await pipeline.pool.fetchval(running, victim.container_id)
                        if current is not None and current != victim.container_id:
                            break
                        await asyncio.sleep(0.1)
                row = await pipeline.pool.fetchrow("SELECT node, deploy_id FROM containers WHERE id = $1", current)
                assert row["node"] == "sim-b"
                request_id = await pipeline.pool.fetchval(
                    "SELECT request_id FROM deploys WHERE id = $1", row["deploy_id"]
                )
                assert request_id == f"keep-{victim.container_id}-1"
                problem_text, output = await pipeline.pool.fetchrow(
                    "SELECT input, output FROM decisions WHERE input LIKE $1 ORDER BY created_at DESC LIMIT 1",
                    '%"evictions": [{"workload": "crunch"%',
                )
                problem = await full_input(pipeline.pool, json.loads(problem_text))
                answer = json.loads(output) if isinstance(output, str) else output
                assert "sim-a" in answer["avoided"]
                assert answer["avoided"]["sim-a"].startswith("evicted crunch")
                assert answer["avoided"]["sim-a"].endswith("back-off 10 min")
                assert solve(problem)["avoided"] == answer["avoided"]  # the avoidance replays

                async def announced() -> bool:  # keep events travel through the outbox after the commit
                    kinds = {e.keep.kind for e in pipeline.events.get(kept, []) if e.keep is not None}
                    return {"evicted", "replacing", "placed"} <= kinds

                await pipeline.wait_for(announced, True)
                evicted_container = await pipeline.pool.fetchrow(
                    "SELECT state, reason FROM containers WHERE id = $1", victim.container_id
                )
                assert evicted_container["state"] == "removed"
    finally:
        await pipeline.close()
    assert (
        _metric("eru_colocation_evictions_total", reason="cpu-satisfaction", node="sim-a", workload="crunch")
        == evicted_before + 1
    )
    assert _metric("eru_colocation_budget_refusals_total", workload="crunch") > refused_before
    assert _metric("eru_colocation_replacements_total", workload="crunch") >= replaced_before + 1
    assert (REGISTRY.get_sample_value("eru_colocation_work_lost_cpu_seconds_count", {"workload": "crunch"}) or 0) >= 1


async def test_a_kept_instance_evicted_the_maximum_number_of_times_is_given_up(
    nats_url: str, postgres_dsn: str
) -> None:
    pipeline = Pipeline(nats_url, postgres_dsn)
    # at most one eviction per instance: the first one is also the last
    await pipeline.start(keep={**KEEP, "max_evictions": 1}, keep_interval_seconds=0.3)
    gave_up_before = _metric("eru_colocation_give_ups_total", workload="solo")
    try:
        async with sim_node(pipeline, "sim-a"), eviction_replica(nats_url, WATERMARKS):
            await pipeline.wait_for(lambda: pipeline.pool.fetchval("SELECT count(*) FROM nodes"), 1)
            trace = {"kind": "step", "steps": [{"at": 0, "cpu": 1.0}, {"at": 10, "cpu": 7.6}]}
            prod = await pipeline.deploy(count=1, workload=_workload("web", "prod", 1, trace))
            assert (await pipeline.terminal(prod)).kind == "completed"
            kept = await pipeline.deploy(
                count=1, keep=True, workload=_workload("solo", "batch", 1, {"kind": "constant", "cpu": 1.0})
            )
            assert (await pipeline.terminal(kept)).kind == "completed"
            state = "SELECT state FROM kept_instances WHERE deploy_id = $1"
            await pipeline.wait_for(lambda: pipeline.pool.fetchval(state, kept), "gave_up", within=60)

            async def announced() -> bool:  # the event travels through the outbox after the state change commits
                return any(e.keep is not None and e.keep.kind == "gave_up" for e in pipeline.events.get(kept, []))

            await pipeline.wait_for(announced, True)
            events = [e.keep for e in pipeline.events.get(kept, []) if e.kind == "keep" and e.keep]
            gave_up = next(e for e in events if e.kind == "gave_up")
            assert gave_up.evictions == 1
            assert "maximum 1" in gave_up.reason
            assert not any(e.kind == "replacing" for e in events)
    finally:
        await pipeline.close()
    assert _metric("eru_colocation_give_ups_total", workload="solo") == gave_up_before + 1
