"""Workloads and containers as a unit through the real allocator, NATS, PostgreSQL and the node agent on the sim
runtime (docs/cli.md "Workloads"): stop, start, restart, dissociate and remove change the ledger and the runtime,
answer with what changed, change nothing more on a repeat (same request id) and refuse a tenant anybody else's
workload — all or nothing."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from pipeline_harness import GiB, Pipeline, SimNodes, assert_usage_consistent, eru_cli

from eru.bus import RemoteError, new_envelope, request
from eru.bus.subjects import allocator_operation, tenant_deploy_request, tenant_operation
from eru.domain import Accepted, DeployRequest
from eru.domain.messages import LifecycleRequest, OperationReply, QueryRequest, RemoveRequest
from eru.domain.tenants import TenantCreateRequest


@contextlib.asynccontextmanager
async def _stack(nats_url: str, dsn: str) -> AsyncIterator[tuple[Pipeline, SimNodes]]:
    pipe = Pipeline(nats_url, dsn)
    await pipe.start()
    sims = SimNodes(nats_url, count=2, cores=4, memory=8 * GiB)
    await sims.start()
    try:
        await pipe.wait_for(lambda: pipe.pool.fetchval("SELECT count(*) FROM nodes"), 2)
        yield pipe, sims
    finally:
        await sims.stop()
        await pipe.close()


@pytest_asyncio.fixture
async def stack(nats_url: str, postgres_dsn: str) -> AsyncIterator[tuple[Pipeline, SimNodes]]:
    async with _stack(nats_url, postgres_dsn) as both:
        yield both


def _workload(name: str = "web", tenant: str = "default") -> dict[str, Any]:
    return {
        "name": name,
        "image": "busybox",
        "tenant": tenant,
        "resources": {"cpu_request": 0.5, "memory_request": GiB},
    }


def _engine(sims: SimNodes, container_id: str) -> Any:
    """The container as the sim runtime of its node has it (None: not on any engine)."""
    for agent in sims.agents:
        found = agent.runtime.containers.get(container_id)
        if found is not None:
            return found
    return None


async def _state(pipe: Pipeline, container_id: str) -> str:
    return str(await pipe.pool.fetchval("SELECT state FROM containers WHERE id = $1", container_id))


async def _usage(pipe: Pipeline) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in await pipe.pool.fetch("SELECT name, used_cpu_map, used_memory FROM nodes ORDER BY name")]


async def _commands(pipe: Pipeline, kind: str) -> int:
    return int(await pipe.pool.fetchval("SELECT count(*) FROM outbox WHERE subject LIKE $1", f"eru.node.%.cmd.{kind}"))


async def _op(pipe: Pipeline, name: str, req: LifecycleRequest, message_id: str | None = None) -> OperationReply:
    envelope = new_envelope(f"{allocator_operation(name)}.request", "test", message_id=message_id)
    return await request(pipe.nc, allocator_operation(name), req, OperationReply, 10, envelope=envelope)


async def test_container_stop_start_restart_keep_the_allocation_and_a_repeat_changes_nothing(
    stack: tuple[Pipeline, SimNodes],
) -> None:
    pipe, sims = stack
    done = await pipe.terminal(await pipe.deploy(count=2, workload=_workload()))
    one, other = done.started
    before = await _usage(pipe)

    stop = LifecycleRequest(container_ids=[one])
    reply = await _op(pipe, "stop", stop, message_id="stop-1")
    assert reply.message == "stopping 1 container(s)"
    assert [(r["id"], r["from"], r["to"]) for r in reply.rows] == [(one, "running", "stopped")]
    await pipe.wait_for(lambda: _state(pipe, one), "stopped")
    assert _engine(sims, one).state == "exited"
    assert _engine(sims, other).state == "running"
    assert await _usage(pipe) == before  # a stopped container keeps its allocation
    await assert_usage_consistent(pipe.pool)
    # the same request again (redelivery): the first answer, no second command
    assert await _op(pipe, "stop", stop, message_id="stop-1") == reply
    assert await _commands(pipe, "stop") == 1
    # a new request for what is already so: nothing sent, and the answer says why
    again = await _op(pipe, "stop", stop)
    assert (again.rows, again.warnings) == ([], [f"container {one} is already stopped"])
    assert await _commands(pipe, "stop") == 1

    started = await _op(pipe, "start", LifecycleRequest(container_ids=[one, other]))
    assert [(r["id"], r["from"], r["to"]) for r in started.rows] == [(one, "stopped", "running")]
    assert started.warnings == [f"container {other} is already running"]
    await pipe.wait_for(lambda: _state(pipe, one), "running")
    assert _engine(sims, one).state == "running"

    first_start = _engine(sims, other).started_at
    restarted = await _op(pipe, "restart", LifecycleRequest(container_ids=[other]))
    assert [(r["id"], r["from"], r["to"]) for r in restarted.rows] == [(other, "running", "running")]
    await pipe.wait_for(lambda: _commands(pipe, "restart"), 1)
    await pipe.wait_for(lambda: _restarted(sims, other, first_start), True)
    assert await _state(pipe, other) == "running"
    assert await _usage(pipe) == before
    await assert_usage_consistent(pipe.pool)


async def _restarted(sims: SimNodes, container_id: str, first_start: float | None) -> bool:
    found = _engine(sims, container_id)
    return bool(found.state == "running" and found.started_at != first_start)


async def test_bad_requests_change_nothing(stack: tuple[Pipeline, SimNodes]) -> None:
    pipe, _sims = stack
    done = await pipe.terminal(await pipe.deploy(count=2, workload=_workload()))
    one, other = done.started
    with pytest.raises(RemoteError, match=r"container_ids\[1\]: unknown container 'nope'") as unknown:
        await _op(pipe, "stop", LifecycleRequest(container_ids=[one, "nope"]))
    assert unknown.value.code == "not_found"
    await pipe.op("remove", RemoveRequest(container_ids=[other]))
    await pipe.wait_for(lambda: _state(pipe, other), "removed")
    with pytest.raises(RemoteError, match=r"container_ids\[1\]: .* is removed; only a running container can be st"):
        await _op(pipe, "stop", LifecycleRequest(container_ids=[one, other]))
    with pytest.raises(RemoteError, match=r"workload: unknown workload 'db' \(no live container runs it\)") as gone:
        await _op(pipe, "stop", LifecycleRequest(workload="db"))
    assert gone.value.code == "not_found"
    with pytest.raises(RemoteError, match=r"name either container_ids or a workload"):
        await request(pipe.nc, allocator_operation("stop"), _Raw({}), OperationReply, 10)
    assert await _commands(pipe, "stop") == 0  # nothing half done
    assert await _state(pipe, one) == "running"


class _Raw:
    """A request body sent as is (one the model would refuse to build)."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    def model_dump(self, **_kwargs: Any) -> dict[str, Any]:
        return self.body


async def test_a_workload_as_a_unit(stack: tuple[Pipeline, SimNodes]) -> None:
    pipe, sims = stack
    first = await pipe.terminal(await pipe.deploy(count=2, workload=_workload()))
    second = await pipe.terminal(await pipe.deploy(count=1, workload=_workload()))
    await pipe.terminal(await pipe.deploy(count=1, workload=_workload("db")))
    web = sorted([*first.started, *second.started])

    async def listed() -> list[dict[str, Any]]:
        return list((await pipe.op("query", QueryRequest(what="workloads"))).rows)

    rows = {row["name"]: row for row in await listed()}
    assert rows["web"] == {
        "name": "web",
        "pod": "p1",
        "tenant": "default",
        "images": ["busybox"],
        "instances": {"running": 3},
        "health": "healthy",
        "unhealthy": 0,
        "deploys": 2,
    }
    assert rows["db"]["instances"] == {"running": 1}

    stopped = await _op(pipe, "stop", LifecycleRequest(workload="web"))
    assert stopped.message == "stopping 3 container(s) of workload web"
    assert sorted(r["id"] for r in stopped.rows) == web
    for cid in web:
        await pipe.wait_for(lambda cid=cid: _state(pipe, cid), "stopped")
        assert _engine(sims, cid).state == "exited"
    rows = {row["name"]: row for row in await listed()}
    assert (rows["web"]["instances"], rows["web"]["health"]) == ({"stopped": 3}, "stopped")
    assert rows["db"]["health"] == "healthy"

    await _op(pipe, "start", LifecycleRequest(workload="web", pod="p1"))
    for cid in web:
        await pipe.wait_for(lambda cid=cid: _state(pipe, cid), "running")
    restarted = await _op(pipe, "restart", LifecycleRequest(workload="web"))
    assert len(restarted.rows) == 3

    removed = await _op(pipe, "remove-workload", LifecycleRequest(workload="web"), message_id="rm-web")
    assert removed.message == "removing 3 container(s) of workload web"
    for cid in web:
        await pipe.wait_for(lambda cid=cid: _state(pipe, cid), "removed")
        assert _engine(sims, cid) is None
    assert [row["name"] for row in await listed()] == ["db"]
    assert await _op(pipe, "remove-workload", LifecycleRequest(workload="web"), message_id="rm-web") == removed
    with pytest.raises(RemoteError, match="unknown workload 'web'"):
        await _op(pipe, "remove-workload", LifecycleRequest(workload="web"))
    await assert_usage_consistent(pipe.pool)


async def test_dissociate_releases_on_the_ledger_and_leaves_the_engine_alone(stack: tuple[Pipeline, SimNodes]) -> None:
    pipe, sims = stack
    done = await pipe.terminal(await pipe.deploy(count=1, workload=_workload()))
    (cid,) = done.started
    reply = await _op(pipe, "dissociate", LifecycleRequest(container_ids=[cid]))
    assert [(r["id"], r["from"], r["to"]) for r in reply.rows] == [(cid, "running", "dissociated")]
    await pipe.wait_for(lambda: _state(pipe, cid), "removed")
    reason = await pipe.pool.fetchval("SELECT reason FROM containers WHERE id = $1", cid)
    assert reason.startswith("dissociated")
    assert _engine(sims, cid).state == "running"  # the engine keeps it
    used = await pipe.pool.fetchval("SELECT sum(used_memory) FROM nodes")
    assert used == 0  # the ledger released it
    await assert_usage_consistent(pipe.pool)
    again = await _op(pipe, "dissociate", LifecycleRequest(container_ids=[cid]))
    assert (again.rows, again.warnings) == ([], [f"container {cid} is already removed"])


async def test_a_tenant_acts_only_on_its_own_workloads(stack: tuple[Pipeline, SimNodes]) -> None:
    pipe, sims = stack
    for tenant in ("a", "b"):
        await pipe.op("tenant-create", TenantCreateRequest(name=tenant))
    deploy = DeployRequest.model_validate({"pod": "p1", "workload": _workload(), "count": 2})
    accepted = await request(pipe.nc, tenant_deploy_request("a"), deploy, Accepted, 10)
    theirs = (await pipe.terminal(accepted.deploy_id)).started

    async def as_tenant(tenant: str, name: str, req: Any) -> OperationReply:
        return await request(pipe.nc, tenant_operation(tenant, name), req, OperationReply, 10)

    sent = await _commands(pipe, "%")
    for name in ("stop", "start", "restart", "dissociate", "remove-workload"):
        with pytest.raises(
            RemoteError, match=r"permission denied: workload: 'web' is not a workload of tenant 'b'"
        ) as e:
            await as_tenant("b", name, LifecycleRequest(workload="web"))
        assert e.value.code == "permission_denied"
        if name != "remove-workload":
            with pytest.raises(RemoteError, match=r"permission denied: container_ids\[0\]: .* is not a container of"):
                await as_tenant("b", name, LifecycleRequest(container_ids=theirs[:1]))
    with pytest.raises(RemoteError, match=r"permission denied: tenant: .* for tenant 'b', not 'a'"):
        await as_tenant("b", "stop", LifecycleRequest(workload="web", tenant="a"))
    assert await _commands(pipe, "%") == sent  # nothing was sent
    assert (await as_tenant("b", "query", QueryRequest(what="workloads"))).rows == []

    mine = await as_tenant("a", "stop", LifecycleRequest(workload="web"))
    assert sorted(r["id"] for r in mine.rows) == sorted(theirs)
    for cid in theirs:
        await pipe.wait_for(lambda cid=cid: _state(pipe, cid), "stopped")
        assert _engine(sims, cid).state == "exited"
    (row,) = (await as_tenant("a", "query", QueryRequest(what="workloads"))).rows
    assert (row["tenant"], row["instances"]) == ("a", {"stopped": 2})


async def test_the_cli_verbs_answer_with_what_changed_and_exit_by_kind(stack: tuple[Pipeline, SimNodes]) -> None:
    pipe, _sims = stack
    done = await pipe.terminal(await pipe.deploy(count=2, workload=_workload()))
    one, other = sorted(done.started)
    url = ["--nats", pipe.nats_url]

    code, text = await eru_cli("workload", "ls", *url)
    assert code == 0, text
    assert "web" in text
    assert "running 2" in text
    assert "healthy" in text
    code, text = await eru_cli("container", "stop", one, *url)
    assert (code, text.splitlines()[0]) == (0, "stopping 1 container(s)"), text
    assert f"{one} on " in text
    assert "running → stopped" in text
    await pipe.wait_for(lambda: _state(pipe, one), "stopped")
    code, text = await eru_cli("workload", "start", "web", "-o", "json", *url)
    assert code == 0, text
    answer = json.loads(text)
    assert (answer["schema"], answer["message"]) == (
        "eru.cli/workload-start",
        "starting 1 container(s) of workload web",
    )
    assert [(r["id"], r["from"], r["to"]) for r in answer["rows"]] == [(one, "stopped", "running")]
    assert answer["warnings"] == [f"container {other} is already running"]
    await pipe.wait_for(lambda: _state(pipe, one), "running")
    code, text = await eru_cli("workload", "ls", "-o", "json", *url)
    (row,) = json.loads(text)["workloads"]
    assert (row["name"], row["instances"], row["health"], row["deploys"]) == ("web", {"running": 2}, "healthy", 1)

    code, text = await eru_cli("workload", "stop", "nope", *url)
    assert code == 4, text
    assert "workload: unknown workload 'nope'" in text
    await pipe.op("remove", RemoveRequest(container_ids=[other]))
    await pipe.wait_for(lambda: _state(pipe, other), "removed")
    code, text = await eru_cli("container", "restart", one, other, "-o", "json", *url)
    assert code == 2, text
    error = json.loads(text)["error"]
    assert (error["kind"], error["field"]) == ("invalid_input", "container_ids[1]")
    assert f"container {other} is removed; only a running or stopped container can be restarted" in error["message"]
    code, text = await eru_cli("container", "stop", *url)
    assert code == 2, text
    assert await _commands(pipe, "restart") == 0
