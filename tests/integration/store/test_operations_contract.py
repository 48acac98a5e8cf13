"""The operations capability's contract (`eru.store.operations.OperationStore`, docs/store.md "The contract suite"),
run against the in-memory store (`eru.testing.memory_store`) and against `PgOperations` on a real PostgreSQL, like
httpx's transports: what realloc's, remove's and replace's unit tests learn on the fake holds on the database.

Nodes are registered through the nodes capability, deploys and containers written through the deploy path's protocol
(a pod session's `submit`, which also charges the nodes), tenants through the tenants capability; then the cases
speak only the operations' verbs, one unit of work at a time: what a unit reads (pods, locked rows, a node with its
usage, condition and batch allowance, what tenants hold, policies and deploy requests), what it writes together
(charges, state changes, a replacement, a decision, node commands), and that a unit that raises leaves nothing; the
reservation verbs: a reservation checked against its node and what others reserved, listed, continued and dropped,
kept as it was by a unit that raises, and what a tenant's live containers use of it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction

import asyncpg
import pytest
import pytest_asyncio

from eru.bus import new_envelope
from eru.bus.subjects import node_command
from eru.domain import NodeCommand, Workload
from eru.domain.colocation import NodeCondition
from eru.fairness.drf import Tenant
from eru.planning import PlanningConfig
from eru.planning.reservations import Amount
from eru.store.nodes import NodeCapacity, NodeStore
from eru.store.operations import OperationStore, Reserved
from eru.store.pool import create_pool
from eru.store.protocol import AllocatorStore, ContainerRow, DecisionRow, DeployRow, OutboxMessage, PodWrites, Usage
from eru.store.queries import QueryStore
from eru.store.tenants import PodReservations, TenantStore
from eru.testing.memory_store import InMemoryStore
from eru_allocator.store.node_store import PgNodes
from eru_allocator.store.operation_store import PgOperations
from eru_allocator.store.postgres import PgStore
from eru_allocator.store.query_store import PgQueries

POD = "cp"
GiB = 1 << 30
CONFIG = PlanningConfig()
N1 = NodeCapacity("n1", POD, {"0": 100, "1": 100}, 4 * GiB, {"0": "0", "1": "0"}, {"0": 4 * GiB})
ONE_CORE = {"cpu_request": 1.0, "cpu_limit": 1.0, "memory_request": GiB, "memory_limit": GiB}
HALF_CORE = {"cpu_request": 0.5, "cpu_limit": 0.5, "memory_request": GiB, "memory_limit": GiB}
REQUEST = {"pod": POD, "workload": {"name": "web", "image": "busybox:1", "tenant": "acme", "env": {"A": "1"}}}
FUTURE = 4102444800.0  # a condition newer than every container here (PostgreSQL compares creation times with it)


@dataclass
class Backend:
    """A store under contract and what a test inspects outside the capability."""

    name: str
    store: AllocatorStore
    nodes: NodeStore
    tenants: TenantStore
    queries: QueryStore
    operations: OperationStore
    subjects: Callable[[], Awaitable[list[str]]]
    """The outbox's subjects, oldest first."""
    set_policy: Callable[[dict[str, object]], Awaitable[None]]


def _memory() -> Backend:
    store = InMemoryStore()

    async def subjects() -> list[str]:
        return [message.subject for message in store.outbox]

    async def set_policy(policy: dict[str, object]) -> None:
        store.pods[POD] = dict(policy)

    return Backend("memory", store, store, store, store, store, subjects, set_policy)


def _postgres(pool: asyncpg.Pool) -> Backend:
    async def subjects() -> list[str]:
        return [row["subject"] for row in await pool.fetch("SELECT subject FROM outbox ORDER BY id")]

    async def set_policy(policy: dict[str, object]) -> None:
        await pool.execute("UPDATE pods SET policy = $2::jsonb WHERE name = $1", POD, json.dumps(policy))

    store = PgStore(pool)
    return Backend("postgres", store, PgNodes(pool), store, PgQueries(pool), PgOperations(pool), subjects, set_policy)


@pytest_asyncio.fixture
async def backend(database: str | None) -> AsyncIterator[Backend]:
    """The in-memory store, then PostgreSQL on the test's database; node n1 registered in pod cp either way."""
    if database is None:
        arranged = _memory()
        await arranged.nodes.register([N1])
        yield arranged
        return
    pool = await create_pool(database, min_size=1, max_size=4)
    try:
        arranged = _postgres(pool)
        await arranged.nodes.register([N1])
        yield arranged
    finally:
        await pool.close()


def _container(
    cid: str, state: str = "running", *, resources: Mapping[str, object] | None = None, klass: str = "prod"
) -> ContainerRow:
    allocation = {"cpu_map": {"0": 100}, "numa_node": "0", "memory": GiB}
    return ContainerRow(
        cid,
        "d1",
        "n1",
        POD,
        "web",
        "busybox:1",
        "acme",
        klass,
        0,
        json.dumps(allocation),
        json.dumps(resources or ONE_CORE),
        state,
        '{"app": "web"}',
        None,
    )


async def _arrange(backend: Backend, *containers: ContainerRow) -> None:
    """Tenant acme, deploy d1 and `containers` on n1, each charged a core and a GiB."""
    await backend.tenants.create_tenant(Tenant("acme", limit={"cpu": Fraction(3)}))
    deploy = DeployRow("d1", "key-d1", POD, "acme", "completed", json.dumps(REQUEST), "{}")
    charge = Usage({"0": 100}, GiB, {"0": GiB})
    async with backend.store.pod(POD) as session:
        await session.submit(PodWrites(deploys=[deploy], containers=list(containers), usage={"n1": [charge] * 2}))


def _message(container_id: str) -> OutboxMessage:
    command = NodeCommand(command_id=f"cmd-{container_id}", node="n1", kind="update", container_id=container_id)
    envelope = new_envelope("eru.node.cmd.update", "contract", message_id=f"cmd-{container_id}")
    return OutboxMessage(node_command("n1", "update"), command, envelope)


async def test_pods_of_names_the_known_containers_only(backend: Backend) -> None:
    await _arrange(backend, _container("c1"), _container("c2"), _container("c3"))
    async with backend.operations.operation() as work:
        assert await work.pods_of(["c2", "nope", "c1"]) == {"c1": POD, "c2": POD}


async def test_containers_are_read_locked_in_the_order_asked_unknown_ones_none(backend: Backend) -> None:
    await _arrange(backend, _container("c1"), _container("c2", "stopped"))
    async with backend.operations.operation() as work:
        await work.lock_pods([POD])
        c2, missing, c1 = await work.lock_containers(["c2", "nope", "c1"])
    assert missing is None
    assert c1 is not None
    assert c2 is not None
    assert (c1.id, c1.state, c1.deploy_id, c1.node, c1.pod, c1.tenant, c1.priority_class) == (
        "c1",
        "running",
        "d1",
        "n1",
        POD,
        "acme",
        "prod",
    )
    assert (c2.id, c2.state, c2.previous_allocation, c2.replaces) == ("c2", "stopped", None, None)
    assert json.loads(c1.resources) == ONE_CORE
    assert json.loads(c1.labels) == {"app": "web"}
    assert json.loads(c1.allocation) == {"cpu_map": {"0": 100}, "numa_node": "0", "memory": GiB}


async def test_a_node_is_read_with_its_usage_pod_and_newest_condition(backend: Backend) -> None:
    await _arrange(backend, _container("c1"), _container("c2"))
    await backend.nodes.write_conditions([NodeCondition(node="n1", time=FUTURE, batch_cpu_capacity=1.5)])
    async with backend.operations.operation() as work:
        node = await work.node("n1")
        assert await work.node("nope") is None
    assert node is not None
    assert (node.pod, dict(node.resources.cpu_map), node.resources.memory) == (POD, {"0": 100, "1": 100}, 4 * GiB)
    assert (dict(node.resources.used_cpu_map), node.resources.used_memory) == ({"0": 200}, 2 * GiB)
    assert node.conditions["batch_cpu_capacity"] == 1.5
    assert node.conditions["time"] == FUTURE


async def test_a_batch_allowance_is_the_condition_less_the_batch_instances_not_running_yet(backend: Backend) -> None:
    planned = _container("b1", "planned", resources=HALF_CORE, klass="batch")
    await _arrange(backend, _container("c1", klass="batch"), planned, _container("c2"))
    async with backend.operations.operation() as work:
        node = await work.node("n1")
        assert node is not None
        bare = await work.with_batch_allowance(node, CONFIG)
    assert (bare.batch_cpu, bare.batch_memory) == (None, None), "no condition: bounded by free resources only"
    condition = NodeCondition(node="n1", time=FUTURE, batch_cpu_capacity=2.0, batch_memory_capacity=3 * GiB)
    await backend.nodes.write_conditions([condition])
    async with backend.operations.operation() as work:
        node = await work.node("n1")
        assert node is not None
        allowed = await work.with_batch_allowance(node, CONFIG)
    assert (allowed.batch_cpu, allowed.batch_memory) == (150, 2 * GiB)
    assert allowed.used_cpu_map == node.resources.used_cpu_map


async def test_what_a_unit_writes_is_committed_together(backend: Backend) -> None:
    await _arrange(backend, _container("c1"), _container("c2"))
    new_allocation = json.dumps({"cpu_map": {"1": 50}, "numa_node": "0", "memory": 2 * GiB})
    previous = json.dumps({"cpu_map": {"0": 100}, "numa_node": "0", "memory": GiB, "resources": ONE_CORE})
    async with backend.operations.operation() as work:
        await work.lock_containers(["c1"])
        await work.change_usage("n1", Usage({"0": 100}, GiB, {"0": GiB}), -1)
        await work.change_usage("n1", Usage({"1": 50}, 2 * GiB, {"0": 2 * GiB}), 1)
        await work.mark_updating("c1", new_allocation, json.dumps(HALF_CORE), previous)
        await work.record_decision(DecisionRow("dec-1", "realloc", '{"kind": "realloc"}', '{"ok": true}'))
        await work.queue([_message("c1"), _message("c2")])
    async with backend.operations.operation() as work:
        node = await work.node("n1")
        (c1,) = await work.lock_containers(["c1"])
    assert node is not None
    assert c1 is not None
    assert dict(node.resources.used_cpu_map) == {"0": 100, "1": 50}
    assert (node.resources.used_memory, dict(node.resources.used_numa_memory)) == (3 * GiB, {"0": 3 * GiB})
    assert (c1.state, json.loads(c1.allocation), json.loads(c1.resources)) == (
        "updating",
        json.loads(new_allocation),
        HALF_CORE,
    )
    assert c1.previous_allocation is not None
    assert json.loads(c1.previous_allocation) == json.loads(previous)
    decision = await backend.queries.decision("dec-1")
    assert decision is not None
    assert (decision.kind, decision.input, decision.output) == (
        "realloc",
        {"kind": "realloc"},
        {"ok": True},
    )
    assert await backend.subjects() == [node_command("n1", "update")] * 2


class _Refused(Exception):
    """Raised by a test's unit of work after it wrote."""


async def test_a_unit_that_raises_leaves_nothing_behind(backend: Backend) -> None:
    await _arrange(backend, _container("c1"), _container("c2"))
    async with backend.operations.operation() as work:
        (old,) = await work.lock_containers(["c2"])
    assert old is not None

    async def write_everything_then_raise() -> None:
        async with backend.operations.operation() as work:
            await work.lock_containers(["c1", "c2"])
            await work.change_usage("n1", Usage({"1": 100}, GiB, {"0": GiB}), 1)
            await work.mark_updating("c1", old.allocation, json.dumps(HALF_CORE), old.allocation)
            await work.mark_stopping(["c2"])
            await work.insert_replacement("r1", old, Workload(name="web", image="busybox:2", tenant="acme"))
            await work.record_decision(DecisionRow("dec-1", "realloc", "{}", "{}"))
            await work.queue([_message("c1")])
            raise _Refused

    with pytest.raises(_Refused):
        await write_everything_then_raise()
    async with backend.operations.operation() as work:
        node = await work.node("n1")
        c1, c2, r1 = await work.lock_containers(["c1", "c2", "r1"])
        assert await work.pending_replacement("c2") is None
    assert node is not None
    assert c1 is not None
    assert c2 is not None
    assert (dict(node.resources.used_cpu_map), node.resources.used_memory) == ({"0": 200}, 2 * GiB)
    assert (c1.state, json.loads(c1.resources), c1.previous_allocation) == ("running", ONE_CORE, None)
    assert (c2.state, r1) == ("running", None)
    assert await backend.queries.decision("dec-1") is None
    assert await backend.subjects() == []


async def test_what_tenants_hold_counts_the_units_own_writes(backend: Backend) -> None:
    await _arrange(backend, _container("c1"), _container("c2"))
    async with backend.operations.operation() as work:
        before = await work.held(POD, CONFIG)
        await work.mark_updating("c1", "{}", json.dumps({**ONE_CORE, "cpu_request": 2.0}), "{}")
        after = await work.held(POD, CONFIG)
        assert await work.held("elsewhere", CONFIG) == {}
    assert before["acme"].allocated == {"cpu": Fraction(2), "memory": Fraction(2 * GiB)}
    assert after["acme"].allocated == {"cpu": Fraction(3), "memory": Fraction(2 * GiB)}
    assert before["acme"].allocations == after["acme"].allocations == 2


async def test_stopping_leaves_the_gone_containers_as_they_are(backend: Backend) -> None:
    await _arrange(backend, _container("c1"), _container("c2", "removed"), _container("c3", "stopped"))
    async with backend.operations.operation() as work:
        await work.mark_stopping(["c1", "c2", "c3", "nope"])
    async with backend.operations.operation() as work:
        rows = await work.lock_containers(["c1", "c2", "c3"])
    assert [row.state if row else None for row in rows] == ["stopping", "removed", "stopping"]


async def test_a_replacement_is_planned_on_the_old_ones_node_pending_until_it_runs(backend: Backend) -> None:
    await _arrange(backend, _container("c1"))
    workload = Workload(name="web", image="busybox:2", tenant="acme", labels={"app": "web2"})
    async with backend.operations.operation() as work:
        (old,) = await work.lock_containers(["c1"])
        assert old is not None
        assert await work.pending_replacement("c1") is None
        await work.insert_replacement("r1", old, workload)
        assert await work.pending_replacement("c1") == "r1"
        held = await work.held(POD, CONFIG)
    assert held["acme"].allocations == 1, "a pending replacement holds nothing of its own"
    async with backend.operations.operation() as work:
        (new,) = await work.lock_containers(["r1"])
        assert await work.pending_replacement("c1") == "r1"
    assert new is not None
    assert (new.state, new.replaces, new.node, new.pod, new.deploy_id, new.image) == (
        "planned",
        "c1",
        "n1",
        POD,
        "d1",
        "busybox:2",
    )
    assert json.loads(new.allocation) == json.loads(old.allocation)
    assert json.loads(new.resources) == ONE_CORE
    assert json.loads(new.labels) == {"app": "web2"}


async def test_a_pods_policy_and_a_deploys_request_are_read_back(backend: Backend) -> None:
    await _arrange(backend, _container("c1"))
    async with backend.operations.operation() as work:
        assert await work.pod_policy(POD) == {}
        assert await work.deploy_request("d1") == REQUEST
        assert await work.deploy_request("nope") is None
    await backend.set_policy({"allow_privileged": False, "scorers": {"spread": 1}})
    async with backend.operations.operation() as work:
        assert await work.pod_policy(POD) == {"allow_privileged": False, "scorers": {"spread": 1}}


async def test_tenants_are_read_with_their_limits(backend: Backend) -> None:
    await _arrange(backend, _container("c1"))
    async with backend.operations.operation() as work:
        tenants = await work.tenants()
    assert tenants["acme"].limit == {"cpu": Fraction(3)}
    assert "default" in tenants


async def test_a_workloads_live_instances_are_listed_by_id_in_a_pod_or_any(backend: Backend) -> None:
    other = _container("a0")._replace(workload="db")
    await _arrange(backend, _container("c2"), _container("c1", "stopped"), _container("c3", "lost"), other)
    async with backend.operations.operation() as work:
        live = await work.live_of_workload("web", POD)
        anywhere = await work.live_of_workload("web", None)
        elsewhere = await work.live_of_workload("web", "elsewhere")
    assert [(row.id, row.tenant) for row in live] == [("c1", "acme"), ("c2", "acme")]
    assert anywhere == live
    assert elsewhere == []


async def test_a_reservation_is_checked_against_its_node_and_what_others_reserved(backend: Backend) -> None:
    await _arrange(backend)
    await backend.tenants.create_tenant(Tenant("zeta"))
    async with backend.operations.operation() as work:
        assert (await work.tenant_exists("acme"), await work.tenant_exists("nope")) == (True, False)
        node = await work.lock_node("n1")
        assert await work.lock_node("nope") is None
        await work.put_reservation("acme", "n1", "1.5", GiB)
        await work.put_reservation("zeta", "n1", "0.5", 2 * GiB)
        await work.put_reservation("zeta", "n1", "0.25", 2 * GiB)  # replaces the earlier one
        assert await work.reserved_by_others("n1", "acme") == Reserved(Fraction(1, 4), 2 * GiB)
        assert await work.reserved_by_others("n1", "other") == Reserved(Fraction(7, 4), 3 * GiB)
    assert node is not None
    assert (node.name, node.pod, dict(node.cpu_map), node.memory, node.share_base) == (
        "n1",
        POD,
        {"0": 100, "1": 100},
        4 * GiB,
        100,
    )


async def test_reservations_are_listed_in_order_continued_and_dropped(backend: Backend) -> None:
    await _arrange(backend)
    await backend.nodes.register([replace(N1, name="n2", pod="other")])
    for name in ("zeta", "beta"):
        await backend.tenants.create_tenant(Tenant(name))
    async with backend.operations.operation() as work:
        for tenant, node in (("zeta", "n1"), ("acme", "n2"), ("acme", "n1"), ("beta", "n1")):
            await work.put_reservation(tenant, node, "1", GiB)
    async with backend.operations.operation() as work:
        everything = await work.reservation_page(None, None, 10, None)
        after = await work.reservation_page(None, None, 2, ("acme", "n2"))
        mine = await work.reservation_page("acme", POD, 10, None)
        assert await work.drop_reservation("acme", "n2") == "other"
        assert await work.drop_reservation("acme", "n2") is None
        left = await work.reservation_page("acme", None, 10, None)
    assert [(r.tenant, r.node, r.pod) for r in everything] == [
        ("acme", "n1", POD),
        ("acme", "n2", "other"),
        ("beta", "n1", POD),
        ("zeta", "n1", POD),
    ]
    assert [(r.tenant, r.node) for r in after] == [("beta", "n1"), ("zeta", "n1")]
    assert [(r.tenant, r.node, r.cpu, r.memory) for r in mine] == [("acme", "n1", 1.0, GiB)]
    assert [(r.tenant, r.node) for r in left] == [("acme", "n1")]


async def test_a_unit_that_raises_keeps_the_reservations_as_they_were(backend: Backend) -> None:
    await _arrange(backend)
    async with backend.operations.operation() as work:
        await work.put_reservation("acme", "n1", "1", GiB)

    async def change_then_raise() -> None:
        async with backend.operations.operation() as work:
            await work.put_reservation("acme", "n1", "2", 2 * GiB)
            await work.drop_reservation("acme", "n1")
            await work.put_reservation("default", "n1", "1", GiB)
            raise _Refused

    with pytest.raises(_Refused):
        await change_then_raise()
    async with backend.operations.operation() as work:
        kept = await work.reservation_page(None, None, 10, None)
    assert [(r.tenant, r.node, r.cpu, r.memory) for r in kept] == [("acme", "n1", 1.0, GiB)]


async def test_what_a_tenants_live_containers_use_of_its_reservation(backend: Backend) -> None:
    bound = {**ONE_CORE, "cpu_bind": True}
    group = _container("g1", resources=bound)._replace(tenant="acme/batch")
    await _arrange(backend, _container("c1", resources=bound), _container("c2"), _container("c3", "removed"), group)
    async with backend.operations.operation() as work:
        assert await work.reservation_use(POD, CONFIG) == {}
        await work.put_reservation("acme", "n1", "1.5", 2 * GiB + GiB // 2)
    async with backend.operations.operation() as work:
        use = await work.reservation_use(POD, CONFIG)
    assert use == {("acme", "n1"): Amount(150, 2 * GiB + GiB // 2)}


async def test_a_pods_reservations_come_with_what_each_tenant_holds_under_them(backend: Backend) -> None:
    bound = {**ONE_CORE, "cpu_bind": True}
    await _arrange(
        backend,
        _container("c1", resources=bound),
        _container("c2", resources=bound),
        _container("c3", "removed", resources=bound),
    )
    assert await backend.tenants.pod_reservations(POD, CONFIG) == PodReservations({}, {})  # none: holdings unread
    await backend.tenants.create_tenant(Tenant("zeta"))
    async with backend.operations.operation() as work:
        await work.put_reservation("acme", "n1", "1.5", GiB)
        await work.put_reservation("zeta", "n1", "0.5", 2 * GiB)
    found = await backend.tenants.pod_reservations(POD, CONFIG)
    assert found.reservations == {"n1": {"acme": Amount(150, GiB), "zeta": Amount(50, 2 * GiB)}}
    assert found.held == {("acme", "n1"): Amount(200, 2 * GiB)}  # two live bound cores; the removed one holds none
    assert await backend.tenants.pod_reservations("elsewhere", CONFIG) == PodReservations({}, {})
