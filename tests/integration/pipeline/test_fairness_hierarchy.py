"""Seed 004's fairness through the real pipeline (NATS + PostgreSQL + allocator + distributor + scripted agent):
quota guarantees held as headroom, reservations placed only for their tenant, two-level DRF admission order. Every
expected number is derived by hand in the comments (docs/fairness-and-scoring.md)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import pytest_asyncio
from pipeline_harness import GiB, Pipeline, ScriptedPipeline, assert_usage_consistent, eru_cli

from eru.bus import RemoteError
from eru.domain.messages import QueryRequest, RemoveRequest
from eru.domain.tenants import (
    TenantCreateRequest,
    TenantListRequest,
    TenantRemoveRequest,
    TenantReservationsRequest,
    TenantReserveRequest,
    TenantSetRequest,
    TenantUnreserveRequest,
)
from eru.replay import RecordedDecision, replay
from eru.store.decisions import full_input


@pytest_asyncio.fixture
async def pipeline(scripted_pipeline: ScriptedPipeline) -> Pipeline:
    pipe, _ = await scripted_pipeline((), start={"replicas": 1, "sweep_interval_seconds": 0.5})
    return pipe


def task(tenant: str, name: str = "job", cpu: float = 1) -> dict[str, Any]:
    return {
        "name": name,
        "image": "busybox",
        "tenant": tenant,
        "resources": {"cpu_bind": True, "cpu_request": cpu, "memory_request": "1GiB"},
    }


async def _reason(pipeline: Pipeline, deploy_id: str) -> dict[str, Any]:
    raw = await pipeline.pool.fetchval("SELECT reason FROM deploy_waits WHERE deploy_id = $1", deploy_id)
    return dict(json.loads(raw)) if raw else {}


async def _status(pipeline: Pipeline, deploy_id: str) -> str:
    return str(await pipeline.pool.fetchval("SELECT status FROM deploys WHERE id = $1", deploy_id))


async def _replays(pipeline: Pipeline, kind: str) -> int:
    rows = await pipeline.pool.fetch("SELECT id, input, output FROM decisions WHERE kind = $1", kind)
    for row in rows:
        problem = await full_input(pipeline.pool, json.loads(row["input"]))
        outcome = replay(RecordedDecision(row["id"], kind, problem, json.loads(row["output"])))
        assert outcome.same, outcome.differences
    return len(rows)


async def test_quota_guarantee_holds_headroom_against_a_burst(pipeline: Pipeline) -> None:
    # one node of 10 cores; G is guaranteed 4 cores (quota), B has none
    await pipeline.register("n1", cores=10, memory=64 * GiB)
    await pipeline.op("tenant-create", TenantCreateRequest(name="G", quota={"cpu": 4}))
    await pipeline.op("tenant-create", TenantCreateRequest(name="B"))

    # B asks 10 cores at once without waiting: headroom 4 is held for G, so 10 − 4 = 6 spare < 10 → refused,
    # naming G's guarantee; nothing allocated
    with pytest.raises(RemoteError) as caught:
        await pipeline.deploy(count=10, workload=task("B"))
    assert caught.value.code == "quota_headroom"
    assert "quota guarantee of G" in caught.value.message
    assert "cpu: needs 10 beyond its own guarantee, 6 spare" in caught.value.message
    assert not await pipeline.containers(tenant="B")

    # 6 fit exactly (10 − 4)
    assert (await pipeline.terminal(await pipeline.deploy(count=6, workload=task("B")))).kind == "completed"
    # the 7th waits (it may wait 30 s) with the reason naming the guarantee
    late = await pipeline.deploy(count=1, workload=task("B", "late"), wait_seconds=30)
    assert await _status(pipeline, late) == "waiting"
    reason = await _reason(pipeline, late)
    assert reason["code"] == "headroom"
    assert reason["details"]["guarantees"] == {"G": {"cpu": 4}}

    listed = await pipeline.op("tenant-ls", TenantListRequest(pod="p1"))
    assert "headroom cpu 4 cores held of 4 cores unreserved free" in listed.message
    rows = {row["name"]: row for row in listed.rows}
    assert rows["G"]["guarantee_left"] == {"cpu": 4}

    # G takes its 4 (within its own guarantee: never held by headroom)
    g = await pipeline.terminal(await pipeline.deploy(count=4, workload=task("G")))
    assert g.kind == "completed"
    assert await _status(pipeline, late) == "waiting"  # the pod is full now

    # one of B's finishes: 1 core free, but G is at 4 of 4 → nothing held → B's waiting request goes
    b_containers = await pipeline.containers(tenant="B")
    await pipeline.op("remove", RemoveRequest(container_ids=[b_containers[0]["id"]]))
    assert (await pipeline.terminal(late)).kind == "completed"

    # one of G's finishes: G holds 3 of 4 → headroom 1 held for G; a new B request waits again for it
    await pipeline.op("remove", RemoveRequest(container_ids=[g.started[0]]))
    await pipeline.wait_for(
        lambda: pipeline.pool.fetchval("SELECT count(*) FROM containers WHERE tenant = 'G' AND state = 'removed'"), 1
    )
    again = await pipeline.deploy(count=1, workload=task("B", "again"), wait_seconds=30)
    assert (await _reason(pipeline, again))["code"] == "headroom"
    # lowering G's quota to 3 (what it holds) releases the headroom: B's request is admitted
    await pipeline.op("tenant-set", TenantSetRequest(name="G", quota={"cpu": 3}))
    assert (await pipeline.terminal(again)).kind == "completed"
    await assert_usage_consistent(pipeline.pool)
    assert await _replays(pipeline, "admission") >= 2


async def test_reservation_is_placed_only_for_its_tenant(pipeline: Pipeline) -> None:
    await pipeline.register("n1", cores=4, memory=16 * GiB)
    await pipeline.register("n2", cores=4, memory=16 * GiB)
    await pipeline.op("tenant-create", TenantCreateRequest(name="R", quota={"cpu": 4}))
    await pipeline.op("tenant-create", TenantCreateRequest(name="O"))
    for bad, field in (
        (TenantReserveRequest(tenant="R", node="n1", cpu=5), "cpu"),
        (TenantReserveRequest(tenant="R", node="nX", cpu=1), "node"),
        (TenantReserveRequest(tenant="nobody", node="n1", cpu=1), "tenant"),
        (TenantReserveRequest(tenant="R", node="n1", memory="lots"), "memory"),
    ):
        with pytest.raises(RemoteError, match=f"^{field}: "):
            await pipeline.op("tenant-reserve", bad)
    await pipeline.op("tenant-reserve", TenantReserveRequest(tenant="R", node="n1", cpu=4, memory="8GiB"))

    nodes = {row["name"]: row for row in (await pipeline.op("query", QueryRequest(what="nodes"))).rows}
    assert (nodes["n1"]["reserved_cpu"], nodes["n1"]["reserved_memory"], nodes["n1"]["reserved_for"]) == (
        4,
        8 * GiB,
        "R",
    )
    assert nodes["n2"]["reserved_cpu"] == 0

    # O sees only n2's 4 cores: 5 do not fit, 4 go to n2 although n1 is idle
    with pytest.raises(RemoteError) as caught:
        await pipeline.deploy(count=5, workload=task("O"))
    assert caught.value.code == "insufficient_capacity"
    o = await pipeline.terminal(await pipeline.deploy(count=4, workload=task("O")))
    assert o.placements == {"n2": 4}
    # R uses its reservation: n1
    r = await pipeline.terminal(await pipeline.deploy(count=2, workload=task("R")))
    assert r.placements == {"n1": 2}
    # reserved resources count toward R's quota: 4 reserved ≥ quota 4 → no guarantee left, no headroom held
    rows = {row["name"]: row for row in (await pipeline.op("tenant-ls", TenantListRequest(pod="p1"))).rows}
    assert rows["R"]["reserved"] == {"cpu": 4, "memory": 8 * GiB}
    assert rows["R"]["guarantee_left"] == {"cpu": 0}
    listed = (await pipeline.op("tenant-reservations", TenantReservationsRequest(tenant="R"))).rows
    assert [(x["node"], x["cpu"], x["used_cpu"], x["used_memory"]) for x in listed] == [("n1", 4, 2, 2 * GiB)]

    # O's deploys recorded the withheld reservation and replay to the same placement
    rows_in = await pipeline.pool.fetch("SELECT input FROM decisions WHERE kind = 'deploy'")
    problems = [await full_input(pipeline.pool, json.loads(row["input"])) for row in rows_in]
    withheld = [problem["withheld"] for problem in problems if "withheld" in problem]
    assert {"n1": {"cpu": 4.0, "memory": 8 * GiB}} in withheld
    assert await _replays(pipeline, "deploy") >= 3

    # R's 2 unused reserved cores on n1 stay withheld from O: O can take nothing more
    with pytest.raises(RemoteError) as caught:
        await pipeline.deploy(count=1, workload=task("O", "more"))
    assert caught.value.code == "insufficient_capacity"
    # unreserved: R's quota is no longer met by the reservation — it holds 2 of 4, so 2 cores are held as headroom,
    # exactly n1's 2 free: O is refused again, now naming R's guarantee
    await pipeline.op("tenant-unreserve", TenantUnreserveRequest(tenant="R", node="n1"))
    with pytest.raises(RemoteError) as caught:
        await pipeline.deploy(count=1, workload=task("O", "more"))
    assert caught.value.code == "quota_headroom"
    assert "cpu: needs 1 beyond its own guarantee, 0 spare of 2 unreserved free, 2 held" in caught.value.message
    # with R's quota lowered to what it holds, O may use n1
    await pipeline.op("tenant-set", TenantSetRequest(name="R", quota={"cpu": 2}))
    more = await pipeline.terminal(await pipeline.deploy(count=1, workload=task("O", "more")))
    assert more.placements == {"n1": 1}
    with pytest.raises(RemoteError, match=r"^node: tenant 'R' has no reservation"):
        await pipeline.op("tenant-unreserve", TenantUnreserveRequest(tenant="R", node="n1"))
    await assert_usage_consistent(pipeline.pool)


async def test_two_level_admission_order(pipeline: Pipeline) -> None:
    await pipeline.op("tenant-create", TenantCreateRequest(name="T"))
    await pipeline.op("tenant-create", TenantCreateRequest(name="T/web", weight=2))
    await pipeline.op("tenant-create", TenantCreateRequest(name="T/batch"))
    await pipeline.op("tenant-create", TenantCreateRequest(name="U"))
    for bad, field in (
        (TenantCreateRequest(name="X/web"), "name: group of unknown tenant 'X'"),
        (TenantCreateRequest(name="T/db", quota={"cpu": 1}), "quota: 'T/db' is a group"),
        (TenantCreateRequest(name="Q", quota={"cpu": 4}, limit={"cpu": 2}), "quota.cpu: guarantee 4 is above"),
    ):
        with pytest.raises(RemoteError, match=field):
            await pipeline.op("tenant-create", bad)
    # a tenant with groups is removed after its groups
    await pipeline.op("tenant-create", TenantCreateRequest(name="V"))
    await pipeline.op("tenant-create", TenantCreateRequest(name="V/x"))
    with pytest.raises(RemoteError, match=r"name: tenant 'V' has groups \(V/x\)"):
        await pipeline.op("tenant-rm", TenantRemoveRequest(name="V"))
    await pipeline.op("tenant-rm", TenantRemoveRequest(name="V/x"))
    await pipeline.op("tenant-rm", TenantRemoveRequest(name="V"))

    # n1 (4 cores) is full with default's work; then five 1-core requests wait, in this arrival order
    await pipeline.register("n1", cores=4, memory=16 * GiB)
    with pytest.raises(RemoteError, match=r"workload\.tenant: unknown tenant 'T/db'"):
        await pipeline.deploy(workload=task("T/db"))
    assert (await pipeline.terminal(await pipeline.deploy(count=4, workload=task("default")))).kind == "completed"
    arrivals = [("T/web", "a1"), ("T/web", "a2"), ("T/batch", "b1"), ("U", "u1"), ("U", "u2")]
    ids = {}
    for tenant, name in arrivals:
        ids[name] = await pipeline.deploy(workload=task(tenant, name), wait_seconds=30)
        assert await _status(pipeline, ids[name]) == "waiting"
    # n2 (4 cores) joins: one admission pass over 5 requests for 4 cores (8 in the pod):
    # 1. T and U hold 0, tie → T's oldest arrived first → T; inside T web and batch hold 0 → web (a1, arrived first)
    # 2. T 1/8 > U 0 → U: u1
    # 3. T 1/8 = U 1/8, one allocation each → T (its oldest open request, a2, arrived before u2); inside T:
    #    web 1/8 / weight 2 = 1/16 > batch 0 → b1 (although a2 arrived before it)
    # 4. T 2/8 > U 1/8 → u2.  a2 keeps waiting.
    await pipeline.register("n2", cores=4, memory=16 * GiB)
    for name in ("a1", "u1", "b1", "u2"):
        assert (await pipeline.terminal(ids[name])).kind == "completed"
    assert await _status(pipeline, ids["a2"]) == "waiting"
    decisions = await pipeline.pool.fetch("SELECT output FROM decisions WHERE kind = 'admission'")
    admitted = [json.loads(row["output"])["admitted"] for row in decisions]
    assert [ids[n] for n in ("a1", "u1", "b1", "u2")] in admitted
    assert await _replays(pipeline, "admission") >= 1

    rows = {row["name"]: row for row in (await pipeline.op("tenant-ls", TenantListRequest(pod="p1"))).rows}
    # level 1: T holds its groups' sum, 2 of the pod's 8 cores
    assert rows["T"]["allocated"]["cpu"] == 2
    assert rows["T"]["level"] == 1
    assert (rows["T/web"]["level"], rows["T/web"]["parent"], rows["T/web"]["allocated"]["cpu"]) == (2, "T", 1)
    assert rows["T/web"]["dominant_share"] == pytest.approx(1 / 8 / 2)
    assert rows["T"]["dominant_share"] == pytest.approx(2 / 8)
    assert rows["T"]["waiting"] == 1


# Each `eru` process costs ~0.7 s of CPU to start (python, nats-py, pydantic, typer): 20–24 s each at load 20 (seen
# under `stress --cpu 2` beside other suites), so the calls that do not depend on each other run together, and the
# hang guard allows for the six sequential steps at that load (about 10 s in all on a quiet machine).
@pytest.mark.timeout(240)
async def test_groups_and_reservations_from_the_cli(pipeline: Pipeline) -> None:
    await pipeline.register("n1", cores=4, memory=8 * GiB)
    nats = ["--nats", pipeline.nats_url]
    assert await eru_cli("tenant", "create", "team", "--quota", "cpu=2", *nats) == (0, "tenant team created\n")
    web, (code, out) = await asyncio.gather(
        eru_cli("tenant", "create", "team/web", "--weight", "2", *nats),
        eru_cli("tenant", "create", "team/db", "--limit", "cpu=1", *nats),
    )
    assert web == (0, "group team/web created\n")
    assert code == 2
    assert "limit: 'team/db' is a group" in out
    (code, out), (group_code, group_out) = await asyncio.gather(
        eru_cli("tenant", "reserve", "team", "--node", "n1", "--cpu", "1", "--memory", "2GiB", *nats),
        eru_cli("tenant", "reserve", "team/web", "--node", "n1", "--cpu", "1", *nats),
    )
    assert (code, out.strip()) == (0, "reserved 1 cores, 2.0GiB on n1 for team")
    assert group_code == 2
    assert "TENANT: 'team/web' is a group" in group_out  # named as typed: the verb's TENANT argument
    done = await pipeline.terminal(await pipeline.deploy(workload=task("team/web")))
    assert done.kind == "completed"

    (code, out), (_, reservations), (_, nodes) = await asyncio.gather(
        eru_cli("tenant", "ls", "--pod", "p1", *nats),
        eru_cli("tenant", "reservations", "-o", "json", *nats),
        eru_cli("node", "ls", *nats),
    )
    assert code == 0
    # team: quota 2, reserved 1, holds 1 (on its reservation) → consumed 1 − 1 + 1 = 1, guarantee left 1; headroom 1
    # of the 3 unreserved free cores; web's share 1/4 / weight 2 = 0.125, team's 1/4 = 0.250
    assert "headroom cpu 1 cores held of 3 cores unreserved free" in " ".join(out.split())
    team = next(line for line in out.splitlines() if "│ team " in line)
    for cell in ("cpu=2", "cpu=1 memory=2.0GiB", "0.250 (cpu)"):
        assert cell in team, (cell, team)
    web_line = next(line for line in out.splitlines() if "└ web" in line)
    assert "0.125 (cpu)" in web_line
    listed = json.loads(reservations)
    assert [(r["tenant"], r["node"], r["cpu"], r["used_cpu"]) for r in listed["reservations"]] == [("team", "n1", 1, 1)]
    assert "1 cores, 2.0GiB for team (3 cores, 6.0GiB)" in nodes
    assert await eru_cli("tenant", "unreserve", "team", "--node", "n1", *nats) == (
        0,
        "reservation of team on n1 removed\n",
    )
    code, out = await eru_cli("tenant", "unreserve", "team", "--node", "n1", *nats)
    assert code == 4  # a reservation that is not there is not found (docs/cli.md "Exit codes")
    assert "has no reservation on node 'n1'" in out
