"""The query responder's rules (eru_allocator.operations.containers.query and its views) on the in-memory store's
queries capability (`eru.store.queries`), in milliseconds: nodes shown `down` when their agent is silent with their
CPU in cores and labels merged, pages that continue after their cursor, a deploy with its containers (gone ones
included), workloads with their health, a workload's images, the fields named when a lookup lacks its key or finds
nothing, the watermark overrides, and where `eru container logs|exec` finds a container. The contract suite
(tests/integration/store/test_queries_contract.py) proves the fake answers as PostgreSQL does.
"""

from __future__ import annotations

import json

import pytest

from eru.domain.messages import QueryRequest, WatermarkRequest
from eru.errors import EruError, InvalidInput, NotFound
from eru.planning import NodeResources
from eru.store.protocol import ContainerRow, DeployRow, PodWrites, Usage
from eru.testing.memory_store import InMemoryStore
from eru_allocator.nodes.watermarks import set_watermarks
from eru_allocator.operations.containers import query
from eru_allocator.operations.workloads.attach import locate

POD = "cp"
ALLOCATION = json.dumps({"cpu_map": {"0": 50}, "memory": 1 << 20})
BOUND = json.dumps({"cpu_bind": True, "cpu_request": 0.5, "memory_request": 1 << 20})
UNBOUND = json.dumps({"cpu_bind": False, "cpu_request": 1.5, "memory_request": 1 << 20})


async def _store() -> InMemoryStore:
    store = InMemoryStore()
    store.add_pod(POD)
    for name in ("n1", "n2"):
        store.add_node(POD, NodeResources(name, {"0": 100, "1": 100}, 1 << 30), labels={"zone": "a"})
    deploy = DeployRow(
        "d1", "key-1", POD, "acme", "planned", json.dumps({"count": 3, "workload": {"name": "web"}}), "null"
    )
    rows = [
        ContainerRow(
            "c1", "d1", "n1", POD, "web", "img:1", "acme", "prod", 0, ALLOCATION, BOUND, "running", "{}", None
        ),
        ContainerRow("c2", "d1", "n1", POD, "web", "img:1", "acme", "prod", 0, "{}", UNBOUND, "creating", "{}", None),
        ContainerRow("c3", "d1", "n2", POD, "web", "img:1", "acme", "prod", 0, "{}", UNBOUND, "removed", "{}", None),
    ]
    async with store.pod(POD) as session:
        await session.submit(
            PodWrites(deploys=[deploy], containers=rows, usage={"n1": [Usage({"0": 50}, 1 << 20, {})]})
        )
    return store


async def test_a_silent_node_shows_down_with_its_cpu_in_cores() -> None:
    store = await _store()
    store.heartbeat("n1")
    store.now += 60
    reply = await query(store, QueryRequest(what="nodes"), 30.0, watermarks=store)
    n1, n2 = reply.rows
    assert (n1["name"], n1["state"], n2["state"]) == ("n1", "down", "up")
    assert (n1["cpu_total"], n1["cpu_bound"], n1["cpu_requested"]) == (2, 0.5, 2)  # 0.5 bound + 1.5 unbound
    assert n1["effective_labels"] == {"zone": "a"}
    assert n1["containers"] == 2
    assert "silent" not in n1


async def test_container_pages_continue_after_their_cursor() -> None:
    store = await _store()
    first = await query(store, QueryRequest(what="containers", limit=1, include_gone=True), watermarks=store)
    assert [row["id"] for row in first.rows] == ["c1"]
    assert first.next_cursor is not None
    rest = await query(
        store, QueryRequest(what="containers", include_gone=True, cursor=first.next_cursor), watermarks=store
    )
    assert [row["id"] for row in rest.rows] == ["c2", "c3"]
    assert rest.next_cursor is None
    assert rest.rows[0]["resources"] == json.loads(UNBOUND)


async def test_a_deploy_by_request_key_with_its_containers_gone_ones_included() -> None:
    store = await _store()
    reply = await query(store, QueryRequest(what="deploy", deploy_id="key-1"), watermarks=store)
    [found] = reply.rows
    assert (found["deploy"]["id"], found["deploy"]["result"]) == ("d1", None)
    assert [c["id"] for c in found["containers"]] == ["c1", "c2", "c3"]


async def test_a_deploy_lookup_without_its_key_names_deploy_id() -> None:
    store = await _store()
    with pytest.raises(InvalidInput) as raised:
        await query(store, QueryRequest(what="deploy"), watermarks=store)
    assert raised.value.field == "deploy_id"


async def test_workloads_with_their_health_and_their_images() -> None:
    store = await _store()
    reply = await query(store, QueryRequest(what="workloads"), watermarks=store)
    [web] = reply.rows
    assert (web["name"], web["instances"], web["health"], web["images"]) == (
        "web",
        {"creating": 1, "running": 1},
        "degraded",
        ["img:1"],
    )
    history = await query(store, QueryRequest(what="workload_history", workload="web"), watermarks=store)
    assert [(r["image"], r["instances"], r["live"]) for r in history.rows] == [("img:1", 3, 2)]
    with pytest.raises(InvalidInput) as raised:
        await query(store, QueryRequest(what="workload_history"), watermarks=store)
    assert raised.value.field == "workload"


async def test_the_newest_deploys_counted_by_state() -> None:
    store = await _store()
    reply = await query(store, QueryRequest(what="deploys"), watermarks=store)
    [deploy] = reply.rows
    assert (deploy["id"], deploy["count"], deploy["workload"], deploy["states"]) == (
        "d1",
        3,
        "web",
        {"running": 1, "creating": 1, "removed": 1},
    )


async def test_an_unknown_deploy_or_decision_is_not_found_naming_its_field() -> None:
    store = await _store()
    with pytest.raises(NotFound) as raised:
        await query(store, QueryRequest(what="deploy", deploy_id="d9"), watermarks=store)
    assert raised.value.field == "deploy_id"
    assert "unknown deploy 'd9'" in raised.value.reason
    with pytest.raises(NotFound) as raised:
        await query(store, QueryRequest(what="decision", decision_id="dec-9"), watermarks=store)
    assert raised.value.field == "decision_id"
    with pytest.raises(InvalidInput) as missing:
        await query(store, QueryRequest(what="decision"), watermarks=store)
    assert missing.value.field == "decision_id"


async def test_watermark_overrides_are_listed_from_the_watermarks_capability() -> None:
    store = await _store()
    assert (await query(store, QueryRequest(what="watermarks"), watermarks=store)).rows == []
    environment = {"watermarks": {"cpu_forbid": 45, "cpu_suppress": 60, "cpu_evict": 80}, "pods": {}, "nodes": {}}
    request = WatermarkRequest(scope="node", name="n1", set={"cpu_suppress": 50})
    await set_watermarks(store, environment, "test", request)
    reply = await query(store, QueryRequest(what="watermarks"), watermarks=store)
    assert reply.rows == [{"scope": "node", "name": "n1", "settings": {"cpu_suppress": 50}, "version": 1}]


async def test_attach_locates_a_running_container_and_refuses_gone_unplaced_or_silent_ones() -> None:
    store = await _store()
    store.heartbeat("n1")
    assert await locate(store, "c1", 30.0) == "n1"
    with pytest.raises(NotFound) as unknown:
        await locate(store, "c9", 30.0)
    assert unknown.value.field == "container_id"
    with pytest.raises(NotFound, match="is removed"):
        await locate(store, "c3", 30.0)
    with pytest.raises(EruError, match="not started on a node yet") as creating:
        await locate(store, "c2", 30.0)
    assert creating.value.code == "unavailable"
    store.now += 60
    with pytest.raises(EruError, match=r"which is down \(no heartbeat for 60s, the limit is 30s\)") as silent:
        await locate(store, "c1", 30.0)
    assert silent.value.code == "unavailable"
