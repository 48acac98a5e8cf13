"""The queries capability's contract (`eru.store.queries.QueryStore`, docs/store.md "The contract suite"), run against
the in-memory store (`eru.testing.memory_store`) and against `PgQueries` on a real PostgreSQL, like httpx's
transports: what a responder's unit tests learn on the fake holds on the database.

Each test arranges pods, nodes (one cordoned), deploys, containers and decisions through the deploy path's protocol
(`AllocatorStore`: a pod session's `submit`) and the nodes capability, then reads them back only through the
capability's verbs: pod pages with their nodes counted, container pages (filters, gone containers, a tenant and its
groups, the cursor), one deploy by id or request key, the newest deploys with their containers counted by state,
workloads grouped, the images a workload ran, one recorded decision (its compact input put back, and whether it
expired), and whose containers and deploys are. Neither store has history here.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest
import pytest_asyncio

from eru.bus import new_id
from eru.domain.messages import Heartbeat, SetNodeRequest
from eru.errors import InvalidInput
from eru.planning import NodeResources
from eru.store.nodes import NodeStore
from eru.store.pool import create_pool
from eru.store.protocol import (
    AllocatorStore,
    ContainerRow,
    DecisionRow,
    DecisionSnapshotRow,
    DeployRow,
    PodWrites,
    Usage,
)
from eru.store.queries import ContainerFilter, DeployOwner, QueryStore
from eru.testing.memory_store import InMemoryStore
from eru_allocator.nodes.registry import heartbeats, set_node
from eru_allocator.store.node_store import PgNodes
from eru_allocator.store.postgres import PgStore
from eru_allocator.store.query_store import PgQueries

POD = "cp"
OTHER = "edge"
CORES = {"0": 100, "1": 100}
MEMORY = 4 << 30
ALLOCATION = json.dumps({"cpu_map": {"0": 10}, "memory": 16 << 20})
RESOURCES = json.dumps({"cpu_bind": True, "cpu_request": 0.1, "memory_request": 16 << 20})
CHARGE = Usage({"0": 10}, 16 << 20, {})


@dataclass
class Backend:
    """A store under contract: the deploy path and nodes to arrange it, the queries to read it."""

    name: str
    store: AllocatorStore
    nodes: NodeStore
    queries: QueryStore
    beat: Callable[[str], Awaitable[None]]
    """The node's agent sends a heartbeat now."""
    age: Callable[[float], Awaitable[None]]
    """Every heartbeat moves `seconds` into the past (memory: the clock moves on)."""


@pytest_asyncio.fixture
async def backend(database: str | None) -> AsyncIterator[Backend]:
    """The in-memory store, then PostgreSQL on the test's database; pods `cp` (nodes n1, n2, n3 cordoned) and
    `edge` (node e1)."""
    layout = [(POD, "n1"), (POD, "n2"), (POD, "n3"), (OTHER, "e1")]
    if database is None:
        store = InMemoryStore()
        for pod, name in layout:
            store.add_pod(pod)
            store.add_node(pod, NodeResources(name, dict(CORES), MEMORY))
        await store.set_cordoned("n3", True)

        async def beat(name: str) -> None:
            store.heartbeat(name)

        async def age(seconds: float) -> None:
            store.now += seconds

        yield Backend("memory", store, store, store, beat, age)
        return
    pool = await create_pool(database, min_size=1, max_size=4)
    try:
        nodes = PgNodes(pool)
        for pod, name in layout:
            await set_node(nodes, SetNodeRequest(node=name, pod=pod, cpu_map=dict(CORES), memory=MEMORY))
        await nodes.set_cordoned("n3", True)

        async def pg_beat(name: str) -> None:
            await heartbeats(nodes, [Heartbeat(node=name, containers=[])])

        async def pg_age(seconds: float) -> None:
            await pool.execute(
                "UPDATE node_status SET heartbeat_at = heartbeat_at - make_interval(secs => $1)", seconds
            )

        yield Backend("postgres", PgStore(pool), nodes, PgQueries(pool), pg_beat, pg_age)
    finally:
        await pool.close()


def _deploy(deploy_id: str, tenant: str = "acme", *, image: str = "busybox", error: str | None = None) -> DeployRow:
    request = {"count": 2, "workload": {"name": "web", "image": image, "tenant": tenant, "priority_class": "prod"}}
    result: dict[str, object] = {"decision_id": f"dec-{deploy_id}", "placements": {"n1": 2}}
    if error is not None:
        result["error"] = {"message": error}
    status = "failed" if error else "planned"
    return DeployRow(deploy_id, f"key-{deploy_id}", POD, tenant, status, json.dumps(request), json.dumps(result))


def _container(cid: str, deploy: DeployRow, node: str, state: str = "running", image: str = "busybox") -> ContainerRow:
    return ContainerRow(
        cid, deploy.id, node, POD, "web", image, deploy.tenant, "prod", 0, ALLOCATION, RESOURCES, state, "{}", None
    )


async def _submit(
    backend: Backend,
    deploys: list[DeployRow],
    containers: list[ContainerRow],
    decisions: list[DecisionRow] | None = None,
) -> None:
    usage: dict[str, list[Usage]] = {}
    for row in containers:
        if row.state not in ("removed", "failed", "lost"):
            usage.setdefault(row.node, []).append(CHARGE)
    async with backend.store.pod(POD) as session:
        await session.submit(PodWrites(decisions or [], deploys=deploys, containers=containers, usage=usage))


async def _arranged(backend: Backend) -> None:
    """d1 (acme): c1 on n2, c2 on n1, c3 removed on n1; d2 (acme/web): c4 on n1; d3 (other) failed, no containers."""
    d1, d2 = _deploy("d1"), _deploy("d2", "acme/web", image="busybox:2")
    await _submit(
        backend,
        [d1],
        [_container("c1", d1, "n2"), _container("c2", d1, "n1"), _container("c3", d1, "n1", state="removed")],
    )
    await _submit(backend, [d2], [_container("c4", d2, "n1", image="busybox:2", state="creating")])
    await _submit(backend, [_deploy("d3", "other", error="no room")], [])


async def test_nodes_listed_with_usage_containers_and_silence(backend: Backend) -> None:
    await _arranged(backend)
    await backend.beat("n1")
    listed = await backend.queries.node_page(POD, None, 30.0, None, None)
    assert [(n.name, n.pod, n.cordoned, n.state, n.containers) for n in listed] == [
        ("n1", POD, False, "up", 2),
        ("n2", POD, False, "up", 1),
        ("n3", POD, True, "up", 0),
    ]
    n1, n2, _ = listed
    assert (n1.cpu_map, n1.memory, n1.used_cpu_map, n1.used_memory) == (CORES, MEMORY, {"0": 20}, 32 << 20)
    assert n1.requests == [(json.loads(RESOURCES), 2)]  # the removed container is not counted
    assert (n1.share_base, n1.reserved_cpu, n1.reserved_memory, n1.reserved_for) == (100, 0.0, 0, "")
    assert (n1.silent, n2.silent, n2.heartbeat_at) == (False, False, None)
    assert n1.heartbeat_at is not None
    assert n1.watermark_overrides == {"node": None, "pod": None}
    await backend.age(60)
    aged = await backend.queries.node_page(None, None, 30.0, None, None)
    assert [(n.name, n.silent) for n in aged] == [("e1", False), ("n1", True), ("n2", False), ("n3", False)]
    assert [n.name for n in await backend.queries.node_page(None, "n2", 30.0, None, None)] == ["n2"]
    assert [n.name for n in await backend.queries.node_page(None, None, 30.0, "e1", 2)] == ["n1", "n2"]
    row = n1.as_row()
    assert "silent" not in row
    assert "requests" not in row
    assert row["cpu_map"] == CORES


async def test_pods_in_name_order_with_their_nodes_counted(backend: Backend) -> None:
    pods = await backend.queries.pod_page(None, 10)
    assert [(p.name, p.nodes, p.cordoned) for p in pods] == [(POD, 3, 1), (OTHER, 1, 0)]
    assert [p.name for p in await backend.queries.pod_page(POD, 10)] == [OTHER]
    assert [p.name for p in await backend.queries.pod_page(None, 1)] == [POD]
    assert sorted(pods[0].as_row()) == ["cordoned", "created_at", "name", "nodes"]


async def test_container_pages_filter_and_continue_after_their_cursor(backend: Backend) -> None:
    await _arranged(backend)
    live = await backend.queries.container_page(ContainerFilter(), None, 10)
    assert [(c.node, c.id) for c in live] == [("n1", "c2"), ("n1", "c4"), ("n2", "c1")]
    every = await backend.queries.container_page(ContainerFilter(include_gone=True), None, 10)
    assert [c.id for c in every] == ["c2", "c3", "c4", "c1"]
    first = await backend.queries.container_page(ContainerFilter(), None, 2)
    last = first[-1]
    rest = await backend.queries.container_page(ContainerFilter(), (last.node, last.created_at, last.id), 10)
    assert [c.id for c in first + rest] == ["c2", "c4", "c1"]
    assert [c.id for c in await backend.queries.container_page(ContainerFilter(node="n2"), None, 10)] == ["c1"]
    by_deploy = ContainerFilter(deploy_id="d1", include_gone=True)
    assert [c.id for c in await backend.queries.container_page(by_deploy, None, 10)] == ["c2", "c3", "c1"]
    assert [c.id for c in await backend.queries.container_page(ContainerFilter(container_id="c4"), None, 10)] == ["c4"]
    assert [c.id for c in await backend.queries.container_page(ContainerFilter(tenant="acme"), None, 10)] == [
        "c2",
        "c4",
        "c1",
    ]  # a tenant and its groups
    assert await backend.queries.container_page(ContainerFilter(tenant="other"), None, 10) == []
    assert await backend.queries.container_page(ContainerFilter(pod=OTHER), None, 10) == []
    row = live[0].as_row()
    assert (row["id"], row["class"], row["allocation"], row["labels"], row["state"]) == (
        "c2",
        "prod",
        json.loads(ALLOCATION),
        {},
        "running",
    )
    assert (row["reason"], row["previous_allocation"], row["replaces"], row["health"]) == (None, None, None, None)


async def test_one_deploy_by_id_or_request_key(backend: Backend) -> None:
    await _arranged(backend)
    by_id = await backend.queries.deploy("d1")
    by_key = await backend.queries.deploy("key-d1")
    assert by_id is not None
    assert by_key == by_id
    row = by_id.as_row()
    assert list(row) == ["id", "request_id", "pod", "tenant", "status", "request", "result", "created_at", "updated_at"]
    assert (row["id"], row["request_id"], row["pod"], row["tenant"], row["status"]) == (
        "d1",
        "key-d1",
        POD,
        "acme",
        "planned",
    )
    assert (row["request"]["workload"]["name"], row["result"]["decision_id"]) == ("web", "dec-d1")
    assert await backend.queries.deploy("nope") is None
    assert await backend.queries.deploy_history("d1") is None
    assert await backend.queries.container_history("d1", 10) == []


async def test_the_newest_deploys_with_their_containers_counted(backend: Backend) -> None:
    await _arranged(backend)
    views = await backend.queries.deploy_views(None, 10, None, None)
    assert [v.id for v in views] == ["d3", "d2", "d1"]
    d3, d2, d1 = views
    assert [d1.states, d2.states, d3.states] == [{"running": 2, "removed": 1}, {"creating": 1}, {}]
    assert (d1.decision_id, d1.workload, d1.image, d1.priority_class, d1.count, d1.error) == (
        "dec-d1",
        "web",
        "busybox",
        "prod",
        2,
        None,
    )
    assert (d3.status, d3.error, d2.image, d2.tenant) == ("failed", "no room", "busybox:2", "acme/web")
    older = await backend.queries.deploy_views(None, 10, (d2.created_at, d2.id), None)
    assert [v.id for v in older] == ["d1"]
    assert [v.id for v in await backend.queries.deploy_views(None, 1, None, None)] == ["d3"]
    assert [v.id for v in await backend.queries.deploy_views(None, 10, None, "acme")] == ["d2", "d1"]
    assert await backend.queries.deploy_views(OTHER, 10, None, None) == []


async def test_workloads_grouped_from_their_containers(backend: Backend) -> None:
    await _arranged(backend)
    groups = await backend.queries.workload_groups(None, False, None, None, 10)
    assert [(g.pod, g.tenant, g.workload) for g in groups] == [(POD, "acme", "web"), (POD, "acme/web", "web")]
    acme, web = groups
    assert (acme.images, sorted(acme.states), acme.deploys) == (["busybox"], ["running", "running"], 1)
    assert (web.images, web.states, web.deploys, web.unhealthy, web.starting) == (["busybox:2"], ["creating"], 1, 0, 0)
    gone = await backend.queries.workload_groups(None, True, None, None, 10)
    assert sorted(gone[0].states) == ["removed", "running", "running"]
    after = await backend.queries.workload_groups(None, False, None, (POD, "acme", "web"), 10)
    assert [g.tenant for g in after] == ["acme/web"]
    assert [g.tenant for g in await backend.queries.workload_groups(None, False, "acme", None, 10)] == [
        "acme",
        "acme/web",
    ]
    assert await backend.queries.workload_groups(None, False, "other", None, 10) == []
    assert await backend.queries.workload_groups(OTHER, True, None, None, 10) == []


async def test_the_images_a_workload_ran(backend: Backend) -> None:
    await _arranged(backend)
    runs = await backend.queries.image_runs("web", None, None)
    assert [(r.image, r.instances, r.live) for r in runs] == [("busybox", 3, 2), ("busybox:2", 1, 1)]
    assert all(r.first_at is not None and r.last_at is not None and r.first_at <= r.last_at for r in runs)
    assert [r.image for r in await backend.queries.image_runs("web", None, "acme")] == ["busybox", "busybox:2"]
    assert await backend.queries.image_runs("web", None, "other") == []
    assert await backend.queries.image_runs("db", None, None) == []


async def test_one_recorded_decision(backend: Backend) -> None:
    decision = DecisionRow("dec-1", "deploy", json.dumps({"nodes": [], "requests": []}), json.dumps({"placed": 1}))
    await _submit(backend, [], [], decisions=[decision])
    found = await backend.queries.decision("dec-1")
    assert found is not None
    assert (found.id, found.kind, found.input, found.output) == (
        "dec-1",
        "deploy",
        {"nodes": [], "requests": []},
        {"placed": 1},
    )
    assert await backend.queries.decision("dec-2") is None


async def test_owners_of_containers_and_deploys(backend: Backend) -> None:
    await _arranged(backend)
    owners = await backend.queries.container_tenants(["c4", "c1", "c3", "c9"])
    assert owners == {"c1": "acme", "c3": "acme", "c4": "acme/web"}  # a gone container keeps its tenant
    assert await backend.queries.container_tenants([]) == {}
    assert await backend.queries.deploy_owner("d2", None) == DeployOwner("d2", "acme/web")
    assert await backend.queries.deploy_owner("key-d1", "key-d1") == DeployOwner("d1", "acme")  # by request key
    assert await backend.queries.deploy_owner("d9", "key-d9") is None


async def test_a_compact_decision_input_gets_its_snapshot_chain_back(backend: Backend) -> None:
    n1 = {"name": "n1", "cpu_map": {"0": 100}, "memory": 1024}
    n2 = {"name": "n2", "cpu_map": {"0": 100, "1": 100}, "memory": 2048}
    snapshots = [
        DecisionSnapshotRow("snap-1", json.dumps({"n1": n1, "n2": {**n2, "memory": 1}})),
        DecisionSnapshotRow("snap-2", json.dumps({"@base": "snap-1", "n2": n2})),  # n2 changed since snap-1
    ]
    compact = {"snapshot": "snap-2", "snapshot_counts": {"n1": 2}, "nodes": ["n1", "n2"], "requests": []}
    decision = DecisionRow("dec-1", "deploy", json.dumps(compact), json.dumps({"placed": 2}))
    async with backend.store.pod(POD) as session:  # a batch writes its snapshot rows with its decisions
        await session.submit(PodWrites([decision], decision_snapshots=snapshots))
    assert await backend.queries.full_input(compact) == {
        "nodes": [{**n1, "count": 2}, {**n2, "count": 0}],
        "requests": [],
    }
    full = {"nodes": [{**n1, "count": 0}], "requests": []}
    assert await backend.queries.full_input(full) == full
    with pytest.raises(InvalidInput) as caught:
        await backend.queries.full_input({**compact, "snapshot": "snap-9"})
    assert caught.value.field == "input.snapshot"


async def test_a_decision_never_recorded_has_not_expired(backend: Backend) -> None:
    assert await backend.queries.decision_expired_at(new_id()) is None
    assert await backend.queries.decision_expired_at("dec-9") is None


async def test_a_deploy_never_recorded_has_not_expired(backend: Backend) -> None:
    await _arranged(backend)
    assert await backend.queries.deploy_expired_at(new_id()) is None
    assert await backend.queries.deploy_expired_at("d9") is None


async def test_where_a_container_runs_and_whether_its_node_is_silent(backend: Backend) -> None:
    await _arranged(backend)
    await backend.beat("n1")
    place = await backend.queries.container_place("c2", 30.0)
    assert place is not None
    assert (place.id, place.node, place.state, place.silent) == ("c2", "n1", "running", False)
    assert place.silent_seconds is not None
    assert 0.0 <= place.silent_seconds < 30.0
    never = await backend.queries.container_place("c1", 30.0)  # n2's agent never beat: not silent, no age
    assert never is not None
    assert (never.node, never.silent, never.silent_seconds) == ("n2", False, None)
    gone = await backend.queries.container_place("c3", 30.0)
    assert gone is not None
    assert gone.state == "removed"
    await backend.age(60.0)
    late = await backend.queries.container_place("c4", 30.0)
    assert late is not None
    assert (late.node, late.state, late.silent) == ("n1", "creating", True)
    assert late.silent_seconds is not None
    assert late.silent_seconds >= 60.0
    assert await backend.queries.container_place("c9", 30.0) is None
