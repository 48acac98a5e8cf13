"""Operations through the real pipeline: remove, replace, SetNode, cordon, idempotency and bad input."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import msgpack
import pytest
import pytest_asyncio
from pipeline_harness import (
    GiB,
    Pipeline,
    ScriptedNodeAgent,
    assert_usage_consistent,
    pipeline_with_sim_nodes,
)

from eru.bus import RemoteError, new_envelope, publish, request
from eru.bus.subjects import DEPLOY_REQUEST, node_condition
from eru.domain import Accepted, DeployRequest
from eru.domain.colocation import NodeCondition
from eru.domain.messages import CordonRequest, QueryRequest, RemoveRequest, ReplaceRequest, SetNodeRequest
from eru.replay import RecordedDecision, replay
from eru.store.decisions import full_input


@pytest_asyncio.fixture
async def pipeline(nats_url: str, postgres_dsn: str) -> AsyncIterator[Pipeline]:
    """The pipeline with the real node agent (sim runtime): sim-001 … sim-003, 4 cores and 8 GiB each."""
    async with pipeline_with_sim_nodes(nats_url, postgres_dsn, count=3) as pipe:
        await pipe.op("cordon", CordonRequest(node="sim-003"))
        yield pipe


def bound(cpu: float = 1, name: str = "web", image: str = "busybox") -> dict[str, Any]:
    return {"name": name, "image": image, "resources": {"cpu_bind": True, "cpu_request": cpu, "memory_request": GiB}}


async def _snapshot(pipeline: Pipeline) -> list[Any]:
    nodes = await pipeline.pool.fetch("SELECT name, used_cpu_map, used_memory, version FROM nodes ORDER BY name")
    containers = await pipeline.pool.fetchval("SELECT count(*) FROM containers")
    deploys = await pipeline.pool.fetchval("SELECT count(*) FROM deploys")
    return [[tuple(n) for n in nodes], containers, deploys]


async def test_remove_returns_resources(pipeline: Pipeline) -> None:
    deploy_id = await pipeline.deploy(count=4, workload=bound(1.5))
    done = await pipeline.terminal(deploy_id)
    reply = await pipeline.op("remove", RemoveRequest(container_ids=done.started[:3]))
    assert len(reply.rows) == 3
    await pipeline.wait_for(
        lambda: pipeline.pool.fetchval("SELECT count(*) FROM containers WHERE state = 'removed'"), 3
    )
    await assert_usage_consistent(pipeline.pool)
    used = await pipeline.pool.fetchval("SELECT sum(used_memory) FROM nodes")
    assert used == GiB
    again = await pipeline.op("remove", RemoveRequest(container_ids=done.started[:1]))
    assert again.warnings == [f"container {done.started[0]} is already removed"]
    with pytest.raises(RemoteError, match=r"container_ids\[1\].*unknown container"):
        await pipeline.op("remove", RemoveRequest(container_ids=[done.started[3], "nope"]))
    state = await pipeline.pool.fetchval("SELECT state FROM containers WHERE id = $1", done.started[3])
    assert state == "running"  # nothing half applied


async def test_replace_keeps_the_allocation(pipeline: Pipeline) -> None:
    deploy_id = await pipeline.deploy(count=1, workload=bound(1.5))
    (old,) = (await pipeline.terminal(deploy_id)).started
    before = await _snapshot(pipeline)
    reply = await pipeline.op("replace", ReplaceRequest(container_id=old, image="busybox:2"))
    new = reply.rows[0]["new"]
    await pipeline.wait_for(
        lambda: pipeline.pool.fetchval("SELECT state FROM containers WHERE id = $1", new), "running"
    )
    rows = {r["id"]: r for r in await pipeline.containers(deploy_id=deploy_id)}
    assert rows[old]["state"] == "removed"
    assert rows[new]["image"] == "busybox:2"
    assert json.loads(rows[new]["allocation"]) == json.loads(rows[old]["allocation"])
    after = await _snapshot(pipeline)
    assert [(n[0], n[1], n[2]) for n in after[0]] == [(n[0], n[1], n[2]) for n in before[0]]
    await assert_usage_consistent(pipeline.pool)


async def test_set_node_and_cordon(pipeline: Pipeline) -> None:
    deploy_id = await pipeline.deploy(count=2, mode="each", workload=bound(1))
    await pipeline.terminal(deploy_id)
    assert {r["node"] for r in await pipeline.containers(deploy_id=deploy_id)} == {"sim-001", "sim-002"}  # cordoned
    shrink = await pipeline.op("set-node", SetNodeRequest(node="sim-001", cpu_map={"0": 100}, memory=GiB // 2))
    assert any("below its usage" in w for w in shrink.warnings)
    running = await pipeline.pool.fetchval(
        "SELECT count(*) FROM containers WHERE node = 'sim-001' AND state = 'running'"
    )
    assert running == 2  # running containers are not touched
    more = await pipeline.deploy(count=2, workload=bound(1))
    assert (await pipeline.terminal(more)).kind == "completed"
    assert {r["node"] for r in await pipeline.containers(deploy_id=more)} == {"sim-002"}  # sim-001 takes nothing

    with pytest.raises(RemoteError) as short:
        await pipeline.deploy(count=1, workload=bound(1, name="other"))
    assert short.value.code == "insufficient_capacity"
    failed = await pipeline.terminal(short.value.details["deploy_id"])
    assert failed.kind == "failed"
    assert failed.error is not None
    decision = await pipeline.pool.fetchrow("SELECT input, output FROM decisions WHERE id = $1", failed.decision_id)
    assert "error" in json.loads(decision["output"])
    recorded = RecordedDecision(
        str(failed.decision_id),
        "deploy",
        await full_input(pipeline.pool, json.loads(decision["input"])),
        json.loads(decision["output"]),
    )
    assert replay(recorded).differences == []  # the refusal reproduces too, with the same numbers

    added = await pipeline.op("set-node", SetNodeRequest(node="n9", pod="p1", cpu_map={"0": 100}, memory=GiB))
    assert added.message == "node n9 added"
    await pipeline.op("cordon", CordonRequest(node="n9"))
    await pipeline.op("cordon", CordonRequest(node="sim-003", cordoned=False))
    later = await pipeline.deploy(count=1, workload=bound(1, name="other"))
    assert (await pipeline.terminal(later)).kind == "completed"
    assert {r["node"] for r in await pipeline.containers(deploy_id=later)} == {"sim-003"}
    nodes = await pipeline.op("query", QueryRequest(what="nodes"))
    assert [n["name"] for n in nodes.rows] == ["n9", "sim-001", "sim-002", "sim-003"]
    assert [n["cordoned"] for n in nodes.rows] == [True, False, False, False]
    await assert_usage_consistent(pipeline.pool, shrunk=frozenset({"sim-001"}))


async def test_request_id_never_allocates_twice(pipeline: Pipeline) -> None:
    first = await pipeline.deploy(count=2, request_id="req-1", workload=bound(1))
    again = await pipeline.deploy(count=2, request_id="req-1", workload=bound(1))
    assert first == again
    await pipeline.terminal(first)
    assert len(await pipeline.containers(deploy_id=first)) == 2
    assert await pipeline.pool.fetchval("SELECT count(*) FROM containers") == 2


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"count": 10_001}, "count", "max_deploy_count"),
        ({"workload": {"name": "w", "image": "i", "resources": {"cpu_request": -1}}}, "cpu_request", "≥ 0"),
        ({"workload": {"name": "w", "image": "i", "resources": {"cpu_request": 0.333}}}, "cpu_request", "pieces"),
        ({"pod": "nowhere"}, "pod", "unknown pod"),
        ({"mode": "scatter"}, "mode", "unknown placement mode"),
        ({"count": "three"}, "count", "integer"),
    ],
)
async def test_malformed_requests_get_clear_errors_and_change_nothing(
    pipeline: Pipeline, change: dict[str, Any], field: str, words: str
) -> None:
    before = await _snapshot(pipeline)
    body = {"pod": "p1", "count": 1, "workload": {"name": "w", "image": "i"}, **change}
    reply = await pipeline.nc.request(
        DEPLOY_REQUEST, msgpack.packb(body), timeout=5, headers={"Eru-Reply-To": "_INBOX.ignored"}
    )
    assert b"stream" in reply.data  # a plain client gets JetStream's PubAck on the reply subject …
    with pytest.raises(RemoteError) as error:  # … and eru's typed client gets the error reply
        await request(pipeline.nc, DEPLOY_REQUEST, _Raw(body), Accepted, 5)
    assert error.value.code == "invalid_input"
    assert field in error.value.message
    assert words in error.value.message
    assert await _snapshot(pipeline) == before


async def test_a_body_that_is_not_msgpack_is_answered(pipeline: Pipeline) -> None:
    before = await _snapshot(pipeline)
    inbox = pipeline.nc.new_inbox()
    sub = await pipeline.nc.subscribe(inbox)
    await pipeline.js.publish(DEPLOY_REQUEST, b"\xc1\xc1 not msgpack", headers={"Eru-Reply-To": inbox})
    reply = await sub.next_msg(timeout=10)
    body = msgpack.unpackb(reply.data)
    assert body["code"] == "invalid_input"
    assert "body" in body["message"]
    assert await _snapshot(pipeline) == before
    ok = await pipeline.deploy(count=1, workload=bound(1))  # the allocator keeps serving
    assert (await pipeline.terminal(ok)).kind == "completed"


class _Raw(DeployRequest):
    """A request body sent as given (to send what the model itself would refuse)."""

    def __init__(self, body: dict[str, Any]) -> None:
        object.__setattr__(self, "__dict__", {})
        object.__setattr__(self, "__pydantic_fields_set__", set())
        object.__setattr__(self, "__pydantic_extra__", None)
        object.__setattr__(self, "__pydantic_private__", None)
        object.__setattr__(self, "_body", body)

    def model_dump(self, **_kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        body: dict[str, Any] = object.__getattribute__(self, "_body")
        return body


async def test_a_silent_node_is_down_and_takes_nothing(nats_url: str, postgres_dsn: str) -> None:
    pipe = Pipeline(nats_url, postgres_dsn)
    await pipe.start()
    agent = ScriptedNodeAgent(pipe.nc)
    await agent.start()
    try:
        for name in ("n1", "n2"):
            await pipe.register(name, beat=False)  # heartbeats are under the test's control
        await pipe.pool.execute("UPDATE node_status SET heartbeat_at = now() - interval '1 hour' WHERE name = 'n2'")
        nodes = await pipe.op("query", QueryRequest(what="nodes"))
        assert {n["name"]: n["state"] for n in nodes.rows} == {"n1": "up", "n2": "down"}
        deploy_id = await pipe.deploy(count=2, mode="auto", workload=bound(1))
        assert (await pipe.terminal(deploy_id)).kind == "completed"
        assert {r["node"] for r in await pipe.containers(deploy_id=deploy_id)} == {"n1"}
    finally:
        await agent.stop()
        await pipe.close()


async def test_a_node_moved_to_another_pod_stays_there_when_its_agent_registers_again(
    nats_url: str, postgres_dsn: str
) -> None:
    pipe = Pipeline(nats_url, postgres_dsn)
    await pipe.start()
    try:
        await pipe.register("n1", cores=2)
        await pipe.op("set-node", SetNodeRequest(node="n1", pod="p2"))
        await pipe.register("n1", cores=4)  # the agent restarts: new capacity, same pod
        cores = "SELECT count(*) FROM nodes, jsonb_object_keys(cpu_map) WHERE name = 'n1'"
        await pipe.wait_for(lambda: pipe.pool.fetchval(cores), 4)
        assert await pipe.pool.fetchval("SELECT pod FROM nodes WHERE name = 'n1'") == "p2"
    finally:
        await pipe.close()


async def test_forbid_schedule_keeps_new_batch_off_a_node(nats_url: str, postgres_dsn: str) -> None:
    pipe = Pipeline(nats_url, postgres_dsn)
    await pipe.start()
    agent = ScriptedNodeAgent(pipe.nc)
    await agent.start()
    try:
        for name in ("n1", "n2"):
            await pipe.register(name)
        condition = NodeCondition(node="n2", time=100.0, state="forbid", forbid_schedule_cpu=True)
        await publish(pipe.js, node_condition("n2"), condition, new_envelope("eru.node.condition", "eviction/test"))
        stale = NodeCondition(node="n2", time=50.0)  # older, arriving late: ignored
        await publish(pipe.js, node_condition("n2"), stale, new_envelope("eru.node.condition", "eviction/test"))
        forbidding = "SELECT (conditions->>'forbid_schedule_cpu')::boolean FROM node_status WHERE name = 'n2'"
        await pipe.wait_for(lambda: pipe.pool.fetchval(forbidding), True)
        await asyncio.sleep(0.3)
        assert await pipe.pool.fetchval(forbidding) is True

        batch = {**bound(1, name="crunch"), "priority_class": "batch"}
        deploy_id = await pipe.deploy(count=2, mode="each", workload=batch)
        assert (await pipe.terminal(deploy_id)).kind == "completed"
        assert {r["node"] for r in await pipe.containers(deploy_id=deploy_id)} == {"n1"}
        prod = await pipe.deploy(count=1, mode="each", workload=bound(1, name="web"))
        assert (await pipe.terminal(prod)).kind == "completed"
        assert {r["node"] for r in await pipe.containers(deploy_id=prod)} == {"n1", "n2"}  # prod never sees watermarks
    finally:
        await agent.stop()
        await pipe.close()


async def test_without_a_distributor_the_client_is_told_and_nothing_is_allocated(
    nats_url: str, postgres_dsn: str
) -> None:
    pipe = Pipeline(nats_url, postgres_dsn)
    await pipe.start(distributor=False)
    try:
        await pipe.register("n1")
        with pytest.raises(RemoteError) as refused:
            await pipe.deploy(within=60, count=1, workload=bound(1))
        assert refused.value.code == "unavailable"
        assert "distributor" in refused.value.message
        assert await pipe.pool.fetchval("SELECT count(*) FROM deploys") == 0
        assert await pipe.pool.fetchval("SELECT count(*) FROM containers") == 0
    finally:
        await pipe.close()


async def test_the_pod_policy_refuses_privileges_and_images_and_changes_nothing(pipeline: Pipeline) -> None:
    deploy_id = await pipeline.deploy(count=1, workload=bound(1, image="registry.local/web:1"))
    (running,) = (await pipeline.terminal(deploy_id)).started
    policy = {"image_allow_list": ["registry.local/*"], "scorers": {"least-allocated": 1}}
    await pipeline.pool.execute("UPDATE pods SET policy = $1::jsonb WHERE name = 'p1'", json.dumps(policy))
    before = await _snapshot(pipeline)
    with pytest.raises(RemoteError) as image:
        await pipeline.deploy(count=1, workload=bound(1, image="docker.io/evil:1"))
    assert image.value.code == "invalid_input"
    assert "workload.image" in image.value.message
    privileged = {**bound(1, image="registry.local/web:1"), "privileged": True}
    with pytest.raises(RemoteError) as privilege:
        await pipeline.deploy(count=1, workload=privileged)
    assert "workload.privileged" in privilege.value.message
    with pytest.raises(RemoteError) as replaced:
        await pipeline.op("replace", ReplaceRequest(container_id=running, image="docker.io/evil:2"))
    assert "allow-list" in replaced.value.message
    assert await _snapshot(pipeline) == before
    allowed = await pipeline.deploy(count=1, workload=bound(1, image="registry.local/web:2"))
    assert (await pipeline.terminal(allowed)).kind == "completed"
