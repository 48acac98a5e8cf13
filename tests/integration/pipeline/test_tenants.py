"""Tenants through the real pipeline (NATS + PostgreSQL + allocator + distributor): operations and bad input, limit
enforcement, waiting for capacity, expiry, and DRF admission when two tenants flood one pod
(docs/fairness-and-scoring.md)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from fractions import Fraction
from functools import partial
from typing import Any

import pytest
import pytest_asyncio
from pipeline_harness import GiB, Pipeline, ScriptedNodeAgent, assert_usage_consistent, eru_cli

from eru.bus import RemoteError
from eru.domain import DeployEvent
from eru.domain.messages import ReallocRequest, RemoveRequest
from eru.domain.tenants import TenantCreateRequest, TenantListRequest, TenantSetRequest
from eru.fairness import FillingTenant, Tenant, dominant_share, progressive_filling
from eru.fairness.admission_json import solve_admission
from eru.replay import RecordedDecision, replay


async def _pipeline(nats_url: str, postgres_dsn: str, replicas: int) -> AsyncIterator[Pipeline]:
    pipe = Pipeline(nats_url, postgres_dsn)
    await pipe.start(replicas=replicas, sweep_interval_seconds=0.5)
    agent = ScriptedNodeAgent(pipe.nc)
    await agent.start()
    try:
        yield pipe
    finally:
        await agent.stop()
        await pipe.close()


@pytest_asyncio.fixture
async def pipeline(nats_url: str, postgres_dsn: str) -> AsyncIterator[Pipeline]:
    """One allocator replica, a distributor and a scripted node agent; nodes are registered by each test."""
    async for pipe in _pipeline(nats_url, postgres_dsn, 1):
        yield pipe


@pytest_asyncio.fixture
async def two_replicas(nats_url: str, postgres_dsn: str) -> AsyncIterator[Pipeline]:
    """As `pipeline`, with two allocator replicas sharing the queue and the pod lock."""
    async for pipe in _pipeline(nats_url, postgres_dsn, 2):
        yield pipe


def task(tenant: str, cpu: float, memory: str, name: str = "job") -> dict[str, Any]:
    return {
        "name": name,
        "image": "busybox",
        "tenant": tenant,
        "resources": {"cpu_bind": True, "cpu_request": cpu, "memory_request": memory},
    }


async def _state(pipeline: Pipeline) -> list[Any]:
    nodes = await pipeline.pool.fetch("SELECT name, used_cpu_map, used_memory, version FROM nodes ORDER BY name")
    containers = await pipeline.pool.fetchval("SELECT count(*) FROM containers")
    return [[tuple(n) for n in nodes], containers]


async def _tenants(pipeline: Pipeline, pod: str | None = None) -> dict[str, dict[str, Any]]:
    reply = await pipeline.op("tenant-ls", TenantListRequest(pod=pod))
    return {row["name"]: row for row in reply.rows}


async def test_tenant_operations_and_bad_input(pipeline: Pipeline) -> None:
    await pipeline.register("n1", cores=4, memory=8 * GiB)
    listed = await _tenants(pipeline)
    assert listed["default"]["weight"] == 1
    assert listed["default"]["limit"] == {}
    await pipeline.op(
        "tenant-create", TenantCreateRequest(name="A", weight=2, quota={"cpu": 1}, limit={"cpu": 3, "memory": "4GiB"})
    )
    row = (await _tenants(pipeline))["A"]
    assert (row["weight"], row["quota"], row["limit"]) == (2, {"cpu": 1}, {"cpu": 3, "memory": 4 * GiB})
    assert (row["allocations"], row["dominant_share"]) == (0, 0.0)

    bad = [
        ("tenant-create", TenantCreateRequest(name="A"), "name: tenant 'A' exists"),
        ("tenant-create", TenantCreateRequest(name="B", weight=0), "weight: must be > 0"),
        ("tenant-create", TenantCreateRequest(name="B", quota={"cpu": -1}), "quota.cpu: must be ≥ 0"),
        ("tenant-create", TenantCreateRequest(name="B", limit={"memory": "lots"}), "limit.memory: cannot read"),
        ("tenant-create", TenantCreateRequest(name="B", quota={"gpu": 1}), "quota.gpu: unknown resource"),
        ("tenant-set", TenantSetRequest(name="nobody", weight=3), "name: unknown tenant 'nobody'"),
        ("tenant-set", TenantSetRequest(name="A", weight=5, limit={"cpu": "x"}), "limit.cpu: expected a number"),
    ]
    for operation, model, message in bad:
        with pytest.raises(RemoteError, match=message) as caught:
            await pipeline.op(operation, model)
        # naming a tenant that does not exist is its own code (the CLI exits 4 for it, docs/cli.md "Exit codes")
        assert caught.value.code == ("not_found" if "unknown tenant" in message else "invalid_input")
    assert "B" not in await _tenants(pipeline)
    assert (await _tenants(pipeline))["A"]["weight"] == 2  # the refused set changed nothing

    await pipeline.op("tenant-set", TenantSetRequest(name="A", weight="0.5", limit={}))
    row = (await _tenants(pipeline))["A"]
    assert (row["weight"], row["quota"], row["limit"]) == (0.5, {"cpu": 1}, {})

    with pytest.raises(RemoteError, match=r"workload.tenant: unknown tenant 'ghost'"):
        await pipeline.deploy(workload=task("ghost", 1, "1GiB"))
    for wait in (1e9, float("inf")):
        with pytest.raises(RemoteError, match=r"wait_seconds: .* is above the longest wait"):
            await pipeline.deploy(workload=task("A", 1, "1GiB"), wait_seconds=wait)
    assert await pipeline.pool.fetchval("SELECT count(*) FROM deploys") == 0
    deploy_id = await pipeline.deploy(count=2, workload=task("A", 1, "1GiB"))
    assert (await pipeline.terminal(deploy_id)).kind == "completed"
    row = (await _tenants(pipeline, "p1"))["A"]
    assert row["allocated"] == {"cpu": 2, "memory": 2 * GiB}
    assert row["allocations"] == 2
    assert row["dominant_share"] == pytest.approx((2 / 4) / 0.5)  # cpu 2 of 4 cores, weight 0.5


async def test_limit_refusal_changes_nothing(pipeline: Pipeline) -> None:
    await pipeline.register("n1", cores=4, memory=8 * GiB)
    await pipeline.op("tenant-create", TenantCreateRequest(name="L", limit={"cpu": 2}))
    before = await _state(pipeline)
    with pytest.raises(RemoteError) as caught:
        await pipeline.deploy(count=3, workload=task("L", 1, "1GiB"), wait_seconds=5)
    assert caught.value.code == "tenant_limit"
    assert "cpu: has 0, needs 3 more, limit 2" in caught.value.message
    assert await _state(pipeline) == before
    await pipeline.register("n2", cores=4, memory=8 * GiB)
    before = await _state(pipeline)
    with pytest.raises(RemoteError, match="cpu: has 0, needs 4 more, limit 2") as caught:
        # mode each: 2 instances on every node = 4, checked before placement (count alone would pass)
        await pipeline.deploy(count=2, mode="each", workload=task("L", 1, "1GiB"))
    assert caught.value.code == "tenant_limit"
    assert await _state(pipeline) == before
    assert await pipeline.pool.fetchval("SELECT count(*) FROM deploy_waits") == 0

    done = await pipeline.terminal(await pipeline.deploy(count=2, workload=task("L", 1, "1GiB")))
    assert done.kind == "completed"
    before = await _state(pipeline)
    with pytest.raises(RemoteError, match="cpu: has 2, needs 1 more, limit 2") as caught:
        await pipeline.deploy(count=1, workload=task("L", 1, "1GiB"))
    assert caught.value.code == "tenant_limit"
    assert caught.value.details["resources"]["cpu"] == {"limit": 2, "allocated": 2, "need": 1}
    assert await _state(pipeline) == before
    await assert_usage_consistent(pipeline.pool)

    decisions = await pipeline.pool.fetch("SELECT id, input, output FROM decisions WHERE kind = 'admission'")
    assert len(decisions) == 3  # each refusal's limit check is recorded, and replays to the same answer
    for decision in decisions:
        recorded = RecordedDecision(
            decision["id"], "admission", json.loads(decision["input"]), json.loads(decision["output"])
        )
        outcome = replay(recorded)
        assert outcome.same, outcome.differences
        assert outcome.replayed["waiting"] or outcome.replayed["rejected"]


async def test_waiting_request_is_admitted_when_capacity_frees(pipeline: Pipeline) -> None:
    await pipeline.register("n1", cores=2, memory=8 * GiB)
    first = await pipeline.terminal(await pipeline.deploy(count=2, workload=task("default", 1, "1GiB")))
    assert first.kind == "completed"
    waiting = await pipeline.deploy(count=1, workload=task("default", 1, "1GiB", name="late"), wait_seconds=30)
    status = await pipeline.pool.fetchval("SELECT status FROM deploys WHERE id = $1", waiting)
    assert status == "waiting"
    reason = json.loads(await pipeline.pool.fetchval("SELECT reason FROM deploy_waits WHERE deploy_id = $1", waiting))
    # the refusal at arrival, or the same reason in the admission pass's words if one ran already (NOTIFY at commit)
    assert reason["code"] in ("insufficient_capacity", "capacity"), reason
    assert not await pipeline.containers(deploy_id=waiting)

    await pipeline.op("remove", RemoveRequest(container_ids=first.started[:1]))
    done = await pipeline.terminal(waiting)
    assert done.kind == "completed"
    assert len(done.started) == 1
    assert await pipeline.pool.fetchval("SELECT count(*) FROM deploy_waits") == 0

    # a node joining the pod frees capacity too
    more = await pipeline.deploy(count=2, workload=task("default", 1, "1GiB", name="more"), wait_seconds=30)
    assert await pipeline.pool.fetchval("SELECT status FROM deploys WHERE id = $1", more) == "waiting"
    await pipeline.register("n2", cores=2, memory=8 * GiB)
    done = await pipeline.terminal(more)
    assert done.kind == "completed"
    assert done.placements == {"n2": 2}
    await assert_usage_consistent(pipeline.pool)


async def test_a_wait_that_expires_fails_naming_the_wait(pipeline: Pipeline) -> None:
    await pipeline.register("n1", cores=1, memory=8 * GiB)
    before = await _state(pipeline)
    deploy_id = await pipeline.deploy(count=2, workload=task("default", 1, "1GiB"), wait_seconds=0.5)
    done = await pipeline.terminal(deploy_id)
    assert done.kind == "failed"
    assert done.error is not None
    assert done.error.code == "wait_expired"
    assert "not admitted within wait_seconds=0.5" in done.error.message
    assert done.error.details["code"] in ("insufficient_capacity", "capacity")  # the last reason it waited
    assert await _state(pipeline) == before
    assert await pipeline.pool.fetchval("SELECT status FROM deploys WHERE id = $1", deploy_id) == "failed"
    assert await pipeline.pool.fetchval("SELECT count(*) FROM deploy_waits") == 0


async def _live(pipeline: Pipeline) -> list[Any]:
    return list(
        await pipeline.pool.fetch(
            "SELECT id, tenant FROM containers WHERE state NOT IN ('removed', 'failed', 'stopping') "
            "ORDER BY created_at, id"
        )
    )


async def test_two_tenants_flooding_one_pod_converge_to_drf_shares(two_replicas: Pipeline) -> None:
    """The canonical pod of docs/fairness-and-scoring.md (9 cores, 18 GiB; A tasks {1 CPU, 4 GiB}, B {3 CPU, 1 GiB}). A
    floods first and takes more than its share; then B floods; tasks finish oldest first, and every freed slot goes to
    the waiting requests in DRF order (two replicas share the queue). The allocation ends within one task of DRF's
    answer."""
    pipeline = two_replicas
    await pipeline.register("n1", cores=9, memory=18 * GiB)
    demand = {"A": (1, "4GiB"), "B": (3, "1GiB")}
    for name in demand:
        await pipeline.op("tenant-create", TenantCreateRequest(name=name))
    for name in ("A", "B"):
        cpu, memory = demand[name]
        for index in range(10):
            await pipeline.deploy(workload=task(name, cpu, memory, name=f"{name}{index}"), wait_seconds=60)
        await pipeline.wait_for(lambda: _settled(pipeline), True)
    # B's first request fits (B holds nothing, so DRF serves it first): wait for that admission
    await pipeline.wait_for(lambda: _has_tasks(pipeline, "B"), True)
    await pipeline.wait_for(lambda: _settled(pipeline), True)

    def tasks(rows: list[Any]) -> dict[str, int]:
        return {name: sum(1 for row in rows if row["tenant"] == name) for name in demand}

    totals = {"cpu": Fraction(9), "memory": Fraction(18 * GiB)}
    per_task = {
        name: {"cpu": Fraction(cpu), "memory": Fraction(int(memory[:-3]) * GiB)}
        for name, (cpu, memory) in demand.items()
    }
    drf = progressive_filling(totals, [FillingTenant(Tenant(name), per_task[name]) for name in demand]).tasks
    start = tasks(await _live(pipeline))
    assert start != drf  # arrival order gave A more than its share: there is something to converge

    for _ in range(8):
        live = await _live(pipeline)
        await pipeline.op("remove", RemoveRequest(container_ids=[live[0]["id"]]))
        # one finished task's room goes to one waiting request (each tenant's backlog never runs out here)
        await pipeline.wait_for(partial(_settled, pipeline, expect_live=len(live)), True)
    end = tasks(await _live(pipeline))
    print(f"tasks at start {start}, after 8 finished {end}, DRF {drf}")
    for name in demand:
        share = dominant_share({r: a * end[name] for r, a in per_task[name].items()}, totals)
        fair = dominant_share({r: a * drf[name] for r, a in per_task[name].items()}, totals)
        one_task = dominant_share(per_task[name], totals)
        assert abs(share - fair) <= one_task, (name, start, end, drf)
    assert sum(abs(end[name] - drf[name]) for name in demand) < sum(abs(start[name] - drf[name]) for name in demand)
    decisions = await pipeline.pool.fetch("SELECT input, output FROM decisions WHERE kind = 'admission'")
    assert decisions
    for decision in decisions:
        assert solve_admission(json.loads(decision["input"])) == json.loads(decision["output"])
    await assert_usage_consistent(pipeline.pool)


async def _settled(pipeline: Pipeline, expect_live: int | None = None) -> bool:
    """No deploy planned but unfinished, nothing stopping, and (if given) `expect_live` live containers."""
    busy = await pipeline.pool.fetchval(
        "SELECT count(*) FROM containers WHERE state IN ('planned', 'creating', 'stopping')"
    )
    if busy:
        return False
    return expect_live is None or len(await _live(pipeline)) == expect_live


async def _has_tasks(pipeline: Pipeline, tenant: str) -> bool:
    return any(row["tenant"] == tenant for row in await _live(pipeline))


# Each `eru` process costs ~0.7 s of CPU to start: 20–24 s each at load 20 (seen under `stress --cpu 2` beside other
# suites). Calls that do not depend on each other run together; the hang guard allows for the five sequential steps at
# that load (a few seconds in all on a quiet machine).
@pytest.mark.timeout(240)
async def test_tenant_cli(pipeline: Pipeline) -> None:
    await pipeline.register("n1", cores=4, memory=8 * GiB)
    nats = ["--nats", pipeline.nats_url]
    code, out = await eru_cli("tenant", "create", "team", "--weight", "2", "--limit", "cpu=2,memory=4GiB", *nats)
    assert (code, out.strip()) == (0, "tenant team created")
    (code, out), (set_code, set_out), done = await asyncio.gather(
        eru_cli("tenant", "create", "oops", "--quota", "memory=-1GiB", *nats),
        eru_cli("tenant", "set", "team", "--limit", "cpu", *nats),
        _deployed(pipeline, task("team", 1, "1GiB")),
    )
    assert code == 2
    assert "--quota: must be ≥ 0" in out  # refused by the CLI, naming the option typed
    assert set_code == 2
    assert "--limit: expected resource=amount pairs" in set_out
    assert done.kind == "completed"
    (code, out), (_, as_json) = await asyncio.gather(
        eru_cli("tenant", "ls", "--pod", "p1", *nats),
        eru_cli("tenant", "ls", "--pod", "p1", "-o", "json", *nats),
    )
    assert code == 0
    team = next(line for line in out.splitlines() if "team" in line)
    # weight, limit, held cpu and memory, 1 container, 0 waiting, (1/4 cores) / weight 2 = 0.125
    for cell in ("2", "cpu=2 memory=4.0GiB", "1.0GiB", "0.125 (cpu)"):
        assert cell in team, (cell, team)
    assert "oops" not in out
    listed = json.loads(as_json)
    assert (listed["schema"], listed["schema_version"]) == ("eru.cli/tenant-ls", 1)
    row = next(t for t in listed["tenants"] if t["name"] == "team")
    assert (row["allocations"], row["waiting"], row["limit"]) == (1, 0, {"cpu": 2, "memory": 4 * GiB})

    # tenant rm: refused while the tenant holds a container (nothing removed), for `default`, for an unknown name
    (code, out), (default_code, default_out), (ghost_code, ghost_out) = await asyncio.gather(
        eru_cli("tenant", "rm", "team", *nats),
        eru_cli("tenant", "rm", "default", *nats),
        eru_cli("tenant", "rm", "ghost", *nats),
    )
    assert code == 2
    assert "tenant 'team' still holds 1 live container(s) and 0 waiting request(s)" in " ".join(out.split())
    assert default_code == 2
    assert "cannot be removed" in default_out
    assert ghost_code == 4  # not found (docs/cli.md "Exit codes")
    assert "unknown tenant 'ghost'" in ghost_out
    assert "team" in await _tenants(pipeline)
    await pipeline.op("remove", RemoveRequest(container_ids=[done.started[0]]))
    await _wait_until_gone(pipeline, done.started[0])
    code, out = await eru_cli("tenant", "rm", "team", *nats)
    assert (code, out.strip()) == (0, "tenant team removed")
    assert "team" not in await _tenants(pipeline)


async def _deployed(pipeline: Pipeline, workload: dict[str, Any]) -> DeployEvent:
    """Deploy `workload` and wait for its terminal event."""
    return await pipeline.terminal(await pipeline.deploy(workload=workload))


async def _wait_until_gone(pipeline: Pipeline, container_id: str) -> None:
    async with asyncio.timeout(20):
        while True:
            if (await pipeline.containers(id=container_id))[0]["state"] in ("removed", "failed"):
                return
            await asyncio.sleep(0.05)  # the row changes in PostgreSQL: polling is the only signal here


async def test_realloc_cannot_take_a_tenant_over_its_limit(pipeline: Pipeline) -> None:
    await pipeline.register("n1", cores=8, memory=8 * GiB)
    await pipeline.op("tenant-create", TenantCreateRequest(name="L", limit={"cpu": 3}))
    done = await pipeline.terminal(await pipeline.deploy(count=2, workload=task("L", 1, "1GiB")))
    assert done.kind == "completed"
    before = await _state(pipeline)
    allocations = [row["allocation"] for row in await pipeline.containers(deploy_id=done.deploy_id)]
    with pytest.raises(
        RemoteError, match=r"tenant 'L' would exceed its limit in pod 'p1' \(cpu: has 2, needs 2 more"
    ) as caught:
        await pipeline.op("realloc", ReallocRequest(container_ids=done.started, cpu_request=1))
    assert caught.value.code == "tenant_limit"
    assert await _state(pipeline) == before  # the whole realloc rolled back
    assert [row["allocation"] for row in await pipeline.containers(deploy_id=done.deploy_id)] == allocations
    reply = await pipeline.op("realloc", ReallocRequest(container_ids=done.started[:1], cpu_request=1))
    assert len(reply.rows) == 1  # up to the limit is fine: 3 cores
