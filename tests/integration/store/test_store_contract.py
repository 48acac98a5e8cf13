"""One contract for the allocator's store (docs/store.md "The contract suite"), run against the in-memory store
(`eru.testing.memory_store`) and against `PgStore` on a real PostgreSQL, like httpx's transports: what the deploy
path's unit tests learn on the fake holds on the database.

Each test arranges a pod through a `Backend` (pods, nodes, tenants: what operators and node agents add, outside the
`AllocatorStore` protocol), then speaks only the protocol's verbs: a deploy batch's reads and `submit`, the
conflict check, what a session that raises leaves behind, snapshots (nodes left out, usage, live counts), tenants and
their usage, admission waits; then the tenants capability (`eru.store.tenants.TenantStore`): creating, changing and
removing tenants and groups, what each holds and what waits for each.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from eru.domain import ResourceRequest
from eru.domain.messages import CordonRequest, Heartbeat, SetNodeRequest
from eru.fairness import Tenant
from eru.planning import NodeResources, PlanningConfig
from eru.planning.left_out import NodeState
from eru.store.pool import create_pool
from eru.store.protocol import (
    AllocatorStore,
    Conflict,
    ContainerRow,
    DeployRow,
    PodWrites,
    SnapshotNeeds,
    Usage,
    WaitRow,
)
from eru.store.tenants import TenantHoldings, TenantStore
from eru.testing.memory_store import InMemoryStore
from eru_allocator.nodes.registry import cordon, heartbeats, set_node
from eru_allocator.store.node_store import PgNodes
from eru_allocator.store.postgres import PgStore

CONFIG = PlanningConfig()
NEEDS = SnapshotNeeds(CONFIG, 30.0)
POD = "cp"
CORES = {"0": 100, "1": 100}
MEMORY = 4 << 30
HALF_CORE = ResourceRequest(cpu_bind=True, cpu_request=0.5, memory_request=64 << 20).model_dump_json()


@dataclass
class Backend:
    """A store under contract and how a test arranges it (what is outside the protocol)."""

    name: str
    store: AllocatorStore
    add_pod: Callable[[str, Mapping[str, Any]], Awaitable[None]]
    add_node: Callable[..., Awaitable[None]]
    """(pod, name, *, up=True, cordoned=False): a node with `CORES` and `MEMORY`."""
    add_tenant: Callable[[Tenant], Awaitable[None]]

    @property
    def tenants(self) -> TenantStore:
        """The same store as the tenants capability (docs/store.md "Capabilities")."""
        assert isinstance(self.store, InMemoryStore | PgStore)
        return self.store


def _memory() -> Backend:
    store = InMemoryStore()

    async def add_pod(name: str, policy: Mapping[str, Any]) -> None:
        store.add_pod(name, policy)

    async def add_node(pod: str, name: str, *, up: bool = True, cordoned: bool = False) -> None:
        if pod not in store.pods:
            store.add_pod(pod)
        store.add_node(pod, NodeResources(name, dict(CORES), MEMORY), state="up" if up else "down", cordoned=cordoned)

    async def add_tenant(tenant: Tenant) -> None:
        store.add_tenant(tenant)

    return Backend("memory", store, add_pod, add_node, add_tenant)


def _postgres(pool: asyncpg.Pool) -> Backend:
    async def add_pod(name: str, policy: Mapping[str, Any]) -> None:
        await pool.execute(
            "INSERT INTO pods (name, policy) VALUES ($1, $2::jsonb)"
            " ON CONFLICT (name) DO UPDATE SET policy = EXCLUDED.policy",
            name,
            json.dumps(policy),
        )

    async def add_node(pod: str, name: str, *, up: bool = True, cordoned: bool = False) -> None:
        await set_node(PgNodes(pool), SetNodeRequest(node=name, pod=pod, cpu_map=dict(CORES), memory=MEMORY))
        await heartbeats(PgNodes(pool), [Heartbeat(node=name, containers=[])])
        if not up:  # as the node-down path leaves it
            await pool.execute("UPDATE nodes SET state = 'down' WHERE name = $1", name)
        if cordoned:
            await cordon(PgNodes(pool), CordonRequest(node=name, cordoned=True))

    async def add_tenant(tenant: Tenant) -> None:
        await pool.execute(
            "INSERT INTO tenants (name, weight, quota, limits) VALUES ($1, $2::numeric, $3::jsonb, $4::jsonb)"
            " ON CONFLICT (name) DO UPDATE SET weight = EXCLUDED.weight, quota = EXCLUDED.quota,"
            " limits = EXCLUDED.limits",
            tenant.name,
            str(float(tenant.weight)),
            json.dumps({key: float(value) for key, value in tenant.quota.items()}),
            json.dumps({key: float(value) for key, value in tenant.limit.items()}) if tenant.limit else None,
        )

    return Backend("postgres", PgStore(pool), add_pod, add_node, add_tenant)


@pytest_asyncio.fixture
async def backend(database: str | None) -> AsyncIterator[Backend]:
    """The in-memory store, then `PgStore` on the test's database."""
    if database is None:
        yield _memory()
        return
    pool = await create_pool(database, min_size=1, max_size=10)
    try:
        postgres = _postgres(pool)
        yield postgres
        assert isinstance(postgres.store, PgStore)
        await postgres.store.wait_unlocked()  # deploy batches let their locks go before the pool closes
    finally:
        await pool.close()


def _deploy(key: str, *, pod: str = POD, tenant: str = "acme", status: str = "completed") -> DeployRow:
    return DeployRow(f"d-{key}", key, pod, tenant, status, '{"count": 1}', json.dumps({"placements": {key: 1}}))


def _container(
    cid: str,
    deploy: DeployRow,
    node: str,
    *,
    workload: str = "web",
    state: str = "running",
    tenant: str | None = None,
    replaces: str | None = None,
) -> ContainerRow:
    return ContainerRow(
        cid,
        deploy.id,
        node,
        deploy.pod,
        workload,
        "busybox",
        tenant or deploy.tenant,
        "prod",
        0,
        json.dumps({"cpu_map": {"0": 50}, "memory": 64 << 20}),
        HALF_CORE,
        state,
        "{}",
        replaces,
    )


async def _pod_with_nodes(backend: Backend) -> None:
    await backend.add_pod(POD, {"scorers": {"qos": 2}})
    for name in ("n3", "n1", "n2"):
        await backend.add_node(POD, name)


async def test_a_submitted_batch_is_found_by_its_request_keys(backend: Backend) -> None:
    await _pod_with_nodes(backend)
    first, second = _deploy("k1"), _deploy("k2", status="failed")
    async with backend.store.deploy_batch(POD) as session:  # first verb open_batch, last verb submit
        policy, found, snapshot = await session.open_batch(["k1", "k2"], NEEDS)
        assert found == {}
        await session.submit(PodWrites(deploys=[first, second]))
    async with backend.store.pod(POD) as session:
        found = await session.find_deploys(["k1", "k2", "k-unknown"])
    assert policy == {"scorers": {"qos": 2}}
    assert sorted(found) == ["k1", "k2"]
    for row in (first, second):
        stored = found[row.request_id]
        assert (stored.id, stored.request_id, stored.status) == (row.id, row.request_id, row.status)
        assert json.loads(stored.result) == json.loads(row.result)
    assert [node.name for node in snapshot.nodes] == ["n1", "n2", "n3"]


async def test_a_request_key_committed_before_is_a_conflict_and_nothing_of_the_batch_is_written(
    backend: Backend,
) -> None:
    await _pod_with_nodes(backend)
    async with backend.store.pod(POD) as session:
        await session.submit(PodWrites(deploys=[_deploy("k1")]))
    again = PodWrites(deploys=[_deploy("k2"), _deploy("k1")._replace(id="d-other")])
    with pytest.raises(Conflict):
        async with backend.store.pod(POD) as session:
            await session.submit(again)
    async with backend.store.pod(POD) as session:
        found = await session.find_deploys(["k1", "k2"])
    assert {key: stored.id for key, stored in found.items()} == {"k1": "d-k1"}


async def test_a_session_that_raises_leaves_nothing_behind(backend: Backend) -> None:
    await _pod_with_nodes(backend)
    deploy = _deploy("k1")
    writes = PodWrites(deploys=[deploy], containers=[_container("c1", deploy, "n1")], usage=_usage("n1"))
    with pytest.raises(RuntimeError, match="after its submit"):
        await _submit_then_fail(backend.store, writes)
    async with backend.store.pod(POD) as session:
        assert await session.find_deploys(["k1"]) == {}
        snapshot = await session.snapshot(NEEDS)
    assert snapshot.counts == {}
    assert all(node.used_memory == 0 and not any(node.used_cpu_map.values()) for node in snapshot.nodes)


async def _submit_then_fail(store: AllocatorStore, writes: PodWrites) -> None:
    async with store.pod(POD) as session:
        await session.submit(writes)
        raise RuntimeError("the batch failed after its submit")


def _usage(*nodes: str) -> dict[str, list[Usage]]:
    return {name: [Usage({"0": 50}, 64 << 20, {})] for name in sorted(nodes)}


async def test_the_snapshot_leaves_out_down_and_cordoned_nodes_and_counts_what_was_submitted(
    backend: Backend,
) -> None:
    await _pod_with_nodes(backend)
    await backend.add_node(POD, "n4", up=False)
    await backend.add_node(POD, "n5", cordoned=True)
    await backend.add_node("elsewhere", "x1")
    deploy = _deploy("k1")
    containers = [
        _container("c1", deploy, "n1"),
        _container("c2", deploy, "n1"),
        _container("c3", deploy, "n2", workload="api"),
        _container("c4", deploy, "n2", state="removed"),
    ]
    async with backend.store.pod(POD) as session:
        await session.submit(PodWrites(deploys=[deploy], containers=containers, usage=_usage("n1", "n2")))
    async with backend.store.pod(POD) as session:
        snapshot = await session.snapshot(NEEDS)
        only_web = await session.snapshot(SnapshotNeeds(CONFIG, 30.0, workloads=frozenset({"web", "new"})))
    assert [node.name for node in snapshot.nodes] == ["n1", "n2", "n3"]
    assert snapshot.unschedulable == {"n4": NodeState(cordoned=False, down=True), "n5": NodeState(True, False)}
    used = {node.name: (node.used_cpu_map.get("0", 0), node.used_memory) for node in snapshot.nodes}
    assert used == {"n1": (50, 64 << 20), "n2": (50, 64 << 20), "n3": (0, 0)}
    assert snapshot.counts == {"web": {"n1": 2}, "api": {"n2": 1}}
    assert only_web.counts == {"web": {"n1": 2}}
    assert await backend.store.live_counts(POD, ["web", "api"]) == snapshot.counts
    assert await backend.store.live_counts("elsewhere", ["web"]) == {}


async def test_schedulable_capacity_of_a_pod_and_of_every_pod(backend: Backend) -> None:
    await _pod_with_nodes(backend)
    await backend.add_node(POD, "n4", up=False)
    await backend.add_node(POD, "n5", cordoned=True)
    await backend.add_node("alpha", "a1")
    mine = await backend.tenants.schedulable_capacity(POD, 30.0)
    assert [(node.name, dict(node.cpu_map), node.memory) for node in mine] == [
        ("n1", CORES, MEMORY),
        ("n2", CORES, MEMORY),
        ("n3", CORES, MEMORY),
    ]
    every = await backend.tenants.schedulable_capacity(None, 30.0)
    assert [node.name for node in every] == ["a1", "n1", "n2", "n3"]  # pods in name order: alpha, cp
    assert await backend.tenants.schedulable_capacity("nowhere", 30.0) == []


async def test_policy_and_pod_names(backend: Backend) -> None:
    await _pod_with_nodes(backend)
    await backend.add_pod("another", {})
    async with backend.store.pod(POD) as session:
        assert await session.policy() == {"scorers": {"qos": 2}}
        assert await session.pod_names(1) == ["another"]
        assert await session.pod_names(10) == ["another", POD]
    async with backend.store.pod("no-such-pod") as session:
        assert await session.policy() is None
        assert (await session.snapshot(NEEDS)).nodes == ()


async def test_tenants_and_what_each_holds(backend: Backend) -> None:
    await _pod_with_nodes(backend)
    acme = Tenant("acme", weight=Fraction(5, 2), quota={"cpu": Fraction(4)})
    zeta = Tenant("zeta", limit={"memory": Fraction(1 << 30)})
    await backend.add_tenant(acme)
    await backend.add_tenant(zeta)
    deploy = _deploy("k1")
    containers = [
        _container("c1", deploy, "n1"),
        _container("c2", deploy, "n2", tenant="acme/batch"),
        _container("c3", deploy, "n2", tenant="zeta"),
        _container("c4", deploy, "n3", replaces="c1"),  # a pending replacement holds nothing of its own yet
        _container("c5", deploy, "n3", state="failed"),
    ]
    async with backend.store.pod(POD) as session:
        await session.submit(PodWrites(deploys=[deploy], containers=containers))
    async with backend.store.pod(POD) as session:
        usage = await session.tenant_usage(CONFIG)
        snapshot = await session.snapshot(NEEDS)
    assert {name: held.allocations for name, held in usage.items()} == {"acme": 1, "acme/batch": 1, "zeta": 1}
    assert usage["acme"] == usage["zeta"]  # one instance of the same size each
    assert snapshot.tenants is not None
    assert snapshot.tenants["acme"] == acme
    assert snapshot.tenants["zeta"] == zeta
    assert snapshot.tenant_usage == usage  # tenants with quotas or limits: the snapshot carries the usage


async def test_waits_are_seen_by_their_pod_only(backend: Backend) -> None:
    await _pod_with_nodes(backend)
    await backend.add_node("other", "o1")
    deploy = _deploy("k1", status="waiting")
    wait = WaitRow(deploy.id, "k1", POD, "acme", 60.0, '{"count": 1}', '{"id": "m-1"}', '{"code": "quota"}')
    async with backend.store.pod(POD) as session:
        assert not await session.has_waiting()
        await session.submit(PodWrites(deploys=[deploy], waits=[wait]))
    async with backend.store.pod(POD) as session:
        assert await session.has_waiting()
    async with backend.store.pod("other") as session:
        assert not await session.has_waiting()


async def test_a_tenant_is_created_once_and_a_group_needs_its_tenant(backend: Backend) -> None:
    tenants = backend.tenants
    acme = Tenant("acme", weight=Fraction(3, 2), quota={"cpu": Fraction(2)}, limit={"memory": Fraction(1 << 30)})
    assert await tenants.create_tenant(Tenant("zeta/batch")) == "unknown parent"
    assert await tenants.create_tenant(acme) == "created"
    assert await tenants.create_tenant(Tenant("acme", weight=Fraction(9))) == "exists"
    assert await tenants.create_tenant(Tenant("acme/batch")) == "created"
    configs = await tenants.tenant_configs()
    assert sorted(configs) == ["acme", "acme/batch", "default"]
    assert configs["acme"] == acme  # the second create changed nothing
    assert await tenants.tenant_names(2) == ["acme", "acme/batch"]


async def test_a_tenant_is_changed_under_its_lock_and_a_refused_change_leaves_it(backend: Backend) -> None:
    tenants = backend.tenants
    await tenants.create_tenant(Tenant("acme", weight=Fraction(1)))

    def refuse(old: Tenant) -> Tenant:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        await tenants.update_tenant("acme", refuse)
    assert (await tenants.tenant_configs())["acme"] == Tenant("acme", weight=Fraction(1))
    changed = await tenants.update_tenant("acme", lambda old: Tenant(old.name, Fraction(5, 2), {"cpu": Fraction(3)}))
    assert changed == Tenant("acme", Fraction(5, 2), {"cpu": Fraction(3)})
    assert (await tenants.tenant_configs())["acme"] == changed
    assert await tenants.update_tenant("nobody", refuse) is None


async def test_removing_a_tenant_sees_what_it_holds_and_a_refusal_keeps_it(backend: Backend) -> None:
    await _pod_with_nodes(backend)
    tenants = backend.tenants
    for name in ("acme", "acme/batch", "zeta"):
        await tenants.create_tenant(Tenant(name))
    deploy = _deploy("k1")
    waiting = _deploy("k2", status="waiting")
    wait = WaitRow(waiting.id, "k2", POD, "acme", 60.0, '{"count": 1}', '{"id": "m-2"}', '{"code": "quota"}')
    containers = [_container("c1", deploy, "n1"), _container("c2", deploy, "n2", state="removed")]
    async with backend.store.pod(POD) as session:
        await session.submit(PodWrites(deploys=[deploy, waiting], containers=containers, waits=[wait]))
    seen: list[TenantHoldings] = []

    def refuse(holdings: TenantHoldings) -> None:
        seen.append(holdings)
        raise ValueError("holds")

    with pytest.raises(ValueError, match="holds"):
        await tenants.remove_tenant("acme", refuse)
    assert seen == [TenantHoldings(live=1, waiting=1, groups=["acme/batch"], reserved_nodes=[])]
    assert "acme" in await tenants.tenant_configs()
    assert await tenants.remove_tenant("zeta", seen.append)
    assert seen[-1] == TenantHoldings(0, 0, [], [])
    assert sorted(await tenants.tenant_configs()) == ["acme", "acme/batch", "default"]
    assert not await tenants.remove_tenant("zeta", seen.append)


async def test_what_each_tenant_holds_and_what_waits_for_it_per_pod_and_overall(backend: Backend) -> None:
    await _pod_with_nodes(backend)
    await backend.add_node("other", "o1")
    here, there = _deploy("k1"), _deploy("k2", pod="other", tenant="zeta")
    waiting = _deploy("k3", pod="other", tenant="zeta", status="waiting")
    wait = WaitRow(waiting.id, "k3", "other", "zeta", 60.0, '{"count": 1}', '{"id": "m-3"}', '{"code": "limit"}')
    async with backend.store.pod(POD) as session:
        await session.submit(
            PodWrites(
                deploys=[here],
                containers=[
                    _container("c1", here, "n1"),
                    _container("c2", here, "n2", tenant="acme/batch"),
                    _container("c3", here, "n3", replaces="c1"),  # a pending replacement holds nothing yet
                    _container("c4", here, "n3", state="lost"),
                ],
            )
        )
    async with backend.store.pod("other") as session:
        await session.submit(
            PodWrites(deploys=[there, waiting], containers=[_container("c5", there, "o1")], waits=[wait])
        )
    tenants = backend.tenants
    in_pod = await tenants.held_by_tenant(POD, CONFIG)
    overall = await tenants.held_by_tenant(None, CONFIG)
    assert {name: held.allocations for name, held in in_pod.items()} == {"acme": 1, "acme/batch": 1}
    assert {name: held.allocations for name, held in overall.items()} == {"acme": 1, "acme/batch": 1, "zeta": 1}
    assert overall["zeta"] == in_pod["acme"]  # one instance of the same size each
    async with backend.store.pod(POD) as session:
        assert await session.tenant_usage(CONFIG) == in_pod  # the pod session's view agrees
    assert await tenants.waiting_by_tenant(POD) == {}
    assert await tenants.waiting_by_tenant(None) == {"zeta": 1}
    assert await tenants.waiting_by_tenant("other") == {"zeta": 1}
