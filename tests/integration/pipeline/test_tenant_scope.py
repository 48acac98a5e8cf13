"""Tenant-scoped requests (`eru.t.<tenant>.…`) through the real allocator: the tenant comes from the subject, and a
tenant can touch only its own containers and deploys (docs/security.md)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from pipeline_harness import GiB, Pipeline, pipeline_with_sim_nodes

from eru.bus import RemoteError, request
from eru.bus.codec import decode
from eru.bus.subjects import tenant_deploy_request, tenant_operation
from eru.domain import Accepted, DeployEvent, DeployRequest
from eru.domain.messages import (
    ContainerStateChange,
    OperationReply,
    QueryRequest,
    ReallocRequest,
    RemoveRequest,
    ReplaceRequest,
)
from eru.domain.tenants import TenantCreateRequest


@pytest_asyncio.fixture
async def pipeline(nats_url: str, postgres_dsn: str) -> AsyncIterator[Pipeline]:
    async with pipeline_with_sim_nodes(nats_url, postgres_dsn, count=2) as pipe:
        for tenant in ("a", "b", "a/web"):
            await pipe.op("tenant-create", TenantCreateRequest(name=tenant))
        yield pipe


def _deploy(tenant_in_body: str = "default", request_id: str | None = None) -> DeployRequest:
    workload = {
        "name": "web",
        "image": "busybox",
        "tenant": tenant_in_body,
        "resources": {"cpu_request": 0.5, "memory_request": GiB // 4},
    }
    return DeployRequest.model_validate({"pod": "p1", "workload": workload, "count": 2, "request_id": request_id})


async def _tenant_deploy(pipe: Pipeline, tenant: str, req: DeployRequest) -> str:
    accepted = await request(pipe.nc, tenant_deploy_request(tenant), req, Accepted, 10)
    return accepted.deploy_id


async def _op(pipe: Pipeline, tenant: str, name: str, model: Any) -> OperationReply:
    return await request(pipe.nc, tenant_operation(tenant, name), model, OperationReply, 10)


async def _snapshot(pipe: Pipeline) -> list[Any]:
    rows = await pipe.pool.fetch("SELECT id, state, allocation FROM containers ORDER BY id")
    nodes = await pipe.pool.fetch("SELECT name, used_cpu_map, used_memory FROM nodes ORDER BY name")
    queued = await pipe.pool.fetchval("SELECT count(*) FROM outbox WHERE subject LIKE 'eru.node.%'")
    return [[tuple(r) for r in rows], [tuple(n) for n in nodes], queued]


async def test_tenant_comes_from_the_subject_and_its_events_reach_only_it(pipeline: Pipeline) -> None:
    seen: dict[str, list[str]] = {"a": [], "b": []}
    changes: list[ContainerStateChange] = []
    events: list[DeployEvent] = []
    arrived = asyncio.Event()

    async def on_deploy_event(msg: Any) -> None:
        seen["a"].append(msg.subject)
        events.append(decode(msg.data, DeployEvent))
        arrived.set()

    async def on_container(msg: Any) -> None:
        seen["a"].append(msg.subject)
        changes.append(decode(msg.data, ContainerStateChange))
        arrived.set()

    async def on_b(msg: Any) -> None:
        seen["b"].append(msg.subject)

    await pipeline.nc.subscribe("eru.t.a.deploy.*.*", cb=on_deploy_event)
    await pipeline.nc.subscribe("eru.t.a.container.>", cb=on_container)
    await pipeline.nc.subscribe("eru.t.b.deploy.*.*", cb=on_b)
    await pipeline.nc.subscribe("eru.t.b.container.>", cb=on_b)
    deploy_id = await _tenant_deploy(pipeline, "a", _deploy())
    done = await pipeline.terminal(deploy_id)
    assert done.kind == "completed"
    rows = await pipeline.containers(deploy_id=deploy_id)
    assert {row["tenant"] for row in rows} == {"a"}
    assert await pipeline.pool.fetchval("SELECT tenant FROM deploys WHERE id = $1", deploy_id) == "a"
    async with asyncio.timeout(10):
        while not any(e.kind == "completed" for e in events) or len({c.container_id for c in changes}) < 2:
            arrived.clear()
            await arrived.wait()
    assert {e.deploy_id for e in events} == {deploy_id}
    assert {c.container_id for c in changes} == {row["id"] for row in rows}
    assert {c.state for c in changes} == {"running"}
    assert seen["b"] == []
    # a body naming another tenant is refused, nothing is deployed
    with pytest.raises(RemoteError) as refused:
        await _tenant_deploy(pipeline, "a", _deploy(tenant_in_body="b"))
    assert refused.value.code == "permission_denied"
    assert "workload.tenant" in refused.value.message
    assert await pipeline.pool.fetchval("SELECT count(*) FROM deploys") == 1


async def test_request_ids_of_two_tenants_never_collide(pipeline: Pipeline) -> None:
    first = await _tenant_deploy(pipeline, "a", _deploy(request_id="same"))
    second = await _tenant_deploy(pipeline, "b", _deploy(request_id="same"))
    again = await _tenant_deploy(pipeline, "a", _deploy(request_id="same"))
    assert first != second
    assert again == first
    status = await _op(pipeline, "a", "query", QueryRequest(what="deploy", deploy_id="same"))
    assert status.rows[0]["deploy"]["id"] == first


async def test_a_tenant_cannot_touch_or_read_another_tenants_containers(pipeline: Pipeline) -> None:
    deploy_id = await _tenant_deploy(pipeline, "a", _deploy())
    await pipeline.terminal(deploy_id)
    theirs = [row["id"] for row in await pipeline.containers(deploy_id=deploy_id)]
    before = await _snapshot(pipeline)
    attempts = [
        ("remove", RemoveRequest(container_ids=theirs)),
        ("realloc", ReallocRequest(container_ids=[theirs[0]], cpu_request=0.5)),
        ("replace", ReplaceRequest(container_id=theirs[0], image="busybox:2")),
        ("query", QueryRequest(what="deploy", deploy_id=deploy_id)),
        ("query", QueryRequest(what="containers", container_id=theirs[0])),
        ("query", QueryRequest(what="nodes")),
    ]
    for name, model in attempts:
        with pytest.raises(RemoteError) as denied:
            await _op(pipeline, "b", name, model)
        assert denied.value.code == "permission_denied", (name, denied.value.message)
    # an unknown container is refused the same way (a tenant learns nothing about other tenants' ids)
    with pytest.raises(RemoteError, match="not a container of tenant 'b'"):
        await _op(pipeline, "b", "remove", RemoveRequest(container_ids=["no-such-container"]))
    listed = await _op(pipeline, "b", "query", QueryRequest(what="containers"))
    assert listed.rows == []
    await asyncio.sleep(0.3)  # nothing may have been queued for the node agent either
    assert await _snapshot(pipeline) == before
    # the owner can
    mine = await _op(pipeline, "a", "query", QueryRequest(what="containers"))
    assert sorted(row["id"] for row in mine.rows) == sorted(theirs)
    removed = await _op(pipeline, "a", "remove", RemoveRequest(container_ids=theirs))
    assert len(removed.rows) == 2
    await pipeline.wait_for(
        lambda: pipeline.pool.fetchval("SELECT count(*) FROM containers WHERE state = 'removed'"), 2
    )


async def test_a_tenant_cannot_read_recorded_decisions(pipeline: Pipeline) -> None:
    """A decision's input is the whole snapshot it was made on (every node, every tenant's holdings), so decisions
    are for operators — not even the tenant whose deploy it placed may read one (regression: any tenant could read
    any decision by id)."""
    deploy_id = await _tenant_deploy(pipeline, "a", _deploy())
    await pipeline.terminal(deploy_id)
    decision_id = await pipeline.pool.fetchval("SELECT result->>'decision_id' FROM deploys WHERE id = $1", deploy_id)
    assert decision_id
    for tenant in ("b", "a"):
        with pytest.raises(RemoteError) as denied:
            await _op(pipeline, tenant, "query", QueryRequest(what="decision", decision_id=decision_id))
        assert denied.value.code == "permission_denied"
        assert "what" in denied.value.message
        assert "operators" in denied.value.message
    # the operator's query (the console's, eru replay's) still reads it
    shown = await pipeline.op("query", QueryRequest(what="decision", decision_id=decision_id))
    assert shown.rows[0]["id"] == decision_id


async def test_a_tenant_deploys_for_its_groups_and_owns_them(pipeline: Pipeline) -> None:
    deploy_id = await _tenant_deploy(pipeline, "a", _deploy(tenant_in_body="a/web"))
    assert (await pipeline.terminal(deploy_id)).kind == "completed"
    rows = await pipeline.containers(deploy_id=deploy_id)
    assert {row["tenant"] for row in rows} == {"a/web"}
    listed = await _op(pipeline, "a", "query", QueryRequest(what="containers"))
    assert sorted(row["id"] for row in listed.rows) == sorted(row["id"] for row in rows)
    assert (await _op(pipeline, "b", "query", QueryRequest(what="containers"))).rows == []
    with pytest.raises(RemoteError) as denied:
        await _tenant_deploy(pipeline, "b", _deploy(tenant_in_body="a/web"))
    assert denied.value.code == "permission_denied"
    with pytest.raises(RemoteError):
        await _op(pipeline, "b", "remove", RemoveRequest(container_ids=[rows[0]["id"]]))
    removed = await _op(pipeline, "a", "remove", RemoveRequest(container_ids=[rows[0]["id"]]))
    assert len(removed.rows) == 1


async def test_a_bad_request_on_a_subject_with_angle_brackets_is_dead_lettered_not_left_pending(
    pipeline: Pipeline,
) -> None:
    """The fault suite's fuzz published on the catalog's literal `eru.t.<tenant>.deploy.request` (legal to nats-server:
    `<`/`>` inside a token are plain characters); dead-lettering refused that subject, so the message was nak'ed for
    ever and held a slot of max_ack_pending (15 of them after a 500-message fuzz)."""
    subject = "eru.t.<tenant>.deploy.request"
    await pipeline.js.publish(subject, b"\x92\x01", headers={"Content-Type": "application/msgpack"})

    async def settled() -> bool:
        info = await pipeline.js.consumer_info("ERU_DEPLOY", "allocator-tenant-deploy")
        return bool(info.num_ack_pending == 0 and info.delivered.stream_seq >= 1 and info.num_pending == 0)

    await pipeline.wait_for(settled, True)
    letter = await pipeline.js.get_last_msg("ERU_DLQ", f"eru.dlq.{subject}")
    assert letter.headers is not None
    assert letter.headers.get("Eru-Dlq-Subject") == subject
