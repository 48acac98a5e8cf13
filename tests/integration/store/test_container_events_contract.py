"""The container events capability's contract (`eru.store.container_events.ContainerEventStore`, docs/store.md "The
contract suite"), run against the in-memory store (`eru.testing.memory_store`) and against `PgContainerEvents` on a
real PostgreSQL, like httpx's transports: what the event handler's unit tests learn on the fake holds on the database.

Each test arranges a pod's nodes, deploys and containers through the deploy path's protocol (`AllocatorStore`:
a pod session's `submit`), then speaks only the capability's verbs: a batch opened and written (a started, a failed
container, a reshaped row, finished deploys, the outbox, node usage given back), a redelivered message, a block that
raises, pending replacements and what they replace, the containers no agent answered for, those of silent nodes,
and health reports. Rows are read back through a batch opened by a message not seen before (health through the
queries capability).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import asyncpg
import pytest
import pytest_asyncio

from eru.bus import new_envelope
from eru.bus.subjects import deploy_event
from eru.domain import DeployEvent, ResourceRequest
from eru.domain.messages import Heartbeat, SetNodeRequest
from eru.planning import NodeResources, PlanningConfig
from eru.store.container_events import ContainerEventStore, EventBatchWrite, EventRow, FinishedDeploy, HealthReport
from eru.store.pool import create_pool
from eru.store.protocol import AllocatorStore, ContainerRow, DeployRow, OutboxMessage, PodWrites, SnapshotNeeds, Usage
from eru.store.queries import ContainerFilter, QueryStore
from eru.testing.memory_store import InMemoryStore
from eru_allocator.nodes.registry import heartbeats, set_node
from eru_allocator.store.container_store import PgContainerEvents
from eru_allocator.store.node_store import PgNodes
from eru_allocator.store.postgres import PgStore
from eru_allocator.store.query_store import PgQueries

POD = "cp"
INBOX = "contract-events"
CORES = {"0": 100, "1": 100}
MEMORY = 4 << 30
ALLOCATION = json.dumps({"cpu_map": {"0": 50}, "memory": 64 << 20})
HALF_CORE = ResourceRequest(cpu_bind=True, cpu_request=0.5, memory_request=64 << 20).model_dump_json()
CHARGE = Usage({"0": 50}, 64 << 20, {})
GIVE_BACK = Usage({"0": -50}, -(64 << 20), {})
NEEDS = SnapshotNeeds(PlanningConfig(), 30.0)


@dataclass
class Backend:
    """A store under contract and how a test arranges it (what is outside the capability)."""

    name: str
    store: AllocatorStore
    events: ContainerEventStore
    add_node: Callable[[str], Awaitable[None]]
    """A node of `POD` with `CORES` and `MEMORY` that has just sent a heartbeat."""
    beat: Callable[[str], Awaitable[None]]
    """The node sends a heartbeat now."""
    age: Callable[[float], Awaitable[None]]
    """Every heartbeat and every container's last change move `seconds` into the past (memory: the clock moves on)."""


def _memory() -> Backend:
    store = InMemoryStore()
    store.add_pod(POD)

    async def add_node(name: str) -> None:
        store.add_node(POD, NodeResources(name, dict(CORES), MEMORY))
        store.heartbeat(name)

    async def beat(name: str) -> None:
        store.heartbeat(name)

    async def age(seconds: float) -> None:
        store.now += seconds

    return Backend("memory", store, store, add_node, beat, age)


def _postgres(pool: asyncpg.Pool) -> Backend:
    async def add_node(name: str) -> None:
        await set_node(PgNodes(pool), SetNodeRequest(node=name, pod=POD, cpu_map=dict(CORES), memory=MEMORY))
        await beat(name)

    async def beat(name: str) -> None:
        await heartbeats(PgNodes(pool), [Heartbeat(node=name, containers=[])])

    async def age(seconds: float) -> None:
        async with pool.acquire() as conn, conn.transaction():
            # the touch trigger would set updated_at to now(): off for this one statement's transaction
            await conn.execute("ALTER TABLE containers DISABLE TRIGGER containers_touch")
            await conn.execute("UPDATE containers SET updated_at = updated_at - make_interval(secs => $1)", seconds)
            await conn.execute("ALTER TABLE containers ENABLE TRIGGER containers_touch")
            await conn.execute(
                "UPDATE node_status SET heartbeat_at = heartbeat_at - make_interval(secs => $1)", seconds
            )

    return Backend("postgres", PgStore(pool), PgContainerEvents(pool), add_node, beat, age)


@pytest_asyncio.fixture
async def backend(database: str | None) -> AsyncIterator[Backend]:
    """The in-memory store, then PostgreSQL on the test's database."""
    if database is None:
        yield _memory()
        return
    pool = await create_pool(database, min_size=1, max_size=4)
    try:
        postgres = _postgres(pool)
        await pool.execute("INSERT INTO pods (name, policy) VALUES ($1, '{}'::jsonb)", POD)
        yield postgres
    finally:
        await pool.close()


def _deploy(deploy_id: str, status: str = "planned") -> DeployRow:
    result = json.dumps({"placements": {"n1": 2}})
    return DeployRow(deploy_id, f"key-{deploy_id}", POD, "acme", status, '{"count": 2}', result)


def _container(cid: str, deploy: DeployRow, node: str = "n1", state: str = "planned", **kw: str) -> ContainerRow:
    row = ContainerRow(
        cid, deploy.id, node, POD, "web", "busybox", "acme", "prod", 0, ALLOCATION, HALF_CORE, state, "{}", None
    )
    return row._replace(**kw)


async def _arrange(backend: Backend, deploys: list[DeployRow], containers: list[ContainerRow]) -> None:
    for node in sorted({row.node for row in containers} | {"n1"}):
        await backend.add_node(node)
    usage: dict[str, list[Usage]] = {}
    for row in containers:
        if row.replaces is None and row.state not in ("removed", "failed", "lost"):
            usage.setdefault(row.node, []).append(CHARGE)
    async with backend.store.pod(POD) as session:
        await session.submit(PodWrites(deploys=deploys, containers=containers, usage=usage))


_reads = iter(range(1_000_000))


async def _read(backend: Backend, *ids: str) -> dict[str, EventRow]:
    """The rows of `ids` (and their replacements), read by a batch opened with a message not seen before."""
    message = f"read-{next(_reads)}"
    async with backend.events.event_batch(INBOX, [message], [(cid, message) for cid in ids]) as session:
        return session.opened.rows


async def _used(backend: Backend, node: str) -> tuple[int, int]:
    async with backend.store.pod(POD) as session:
        snapshot = await session.snapshot(NEEDS)
    [found] = [n for n in snapshot.nodes if n.name == node]
    return found.used_cpu_map.get("0", 0), found.used_memory


async def test_a_batch_reads_what_its_fresh_messages_touch(backend: Backend) -> None:
    deploy = _deploy("d1")
    await _arrange(backend, [deploy], [_container("c1", deploy), _container("c2", deploy, state="running")])
    async with backend.events.event_batch(INBOX, ["m1"], [("c1", "m1")]) as session:
        opened = session.opened
    assert opened.fresh == {"m1"}
    assert opened.deploy_states == {"d1": "planned"}
    assert opened.placements == {"d1": {"n1": 2}}
    assert sorted(opened.rows) == ["c1"]
    row = opened.rows["c1"]
    assert (row.deploy_id, row.node, row.state, row.reason, row.replaces, row.tenant) == (
        "d1",
        "n1",
        "planned",
        None,
        None,
        "acme",
    )
    assert json.loads(row.allocation) == json.loads(ALLOCATION)
    assert json.loads(row.resources) == json.loads(HALF_CORE)
    assert sorted((m.id, m.deploy_id, m.state) for m in opened.members) == [
        ("c1", "d1", "planned"),
        ("c2", "d1", "running"),
    ]


async def test_a_started_event_written_is_read_back_and_a_redelivered_message_is_not_fresh(backend: Backend) -> None:
    deploy = _deploy("d1")
    await _arrange(backend, [deploy], [_container("c1", deploy)])
    async with backend.events.event_batch(INBOX, ["m1"], [("c1", "m1")]) as session:
        row = session.opened.rows["c1"]
        row.state, row.reason = "running", "started"
        assert await session.write(EventBatchWrite(moved=[row])) == set()
    async with backend.events.event_batch(INBOX, ["m1"], [("c1", "m1")]) as session:
        assert session.opened.fresh == set()
        assert session.opened.rows == {}, "a message seen before touches nothing"
    again = (await _read(backend, "c1"))["c1"]
    assert (again.state, again.reason) == ("running", "started")


async def test_a_block_that_raises_leaves_neither_marks_nor_writes(backend: Backend) -> None:
    deploy = _deploy("d1")
    await _arrange(backend, [deploy], [_container("c1", deploy)])
    with pytest.raises(RuntimeError, match="after its write"):
        await _write_then_fail(backend.events)
    async with backend.events.event_batch(INBOX, ["m1"], [("c1", "m1")]) as session:
        assert session.opened.fresh == {"m1"}
        assert session.opened.rows["c1"].state == "planned"
    assert await _used(backend, "n1") == (50, 64 << 20)


async def _write_then_fail(events: ContainerEventStore) -> None:
    async with events.event_batch(INBOX, ["m1"], [("c1", "m1")]) as session:
        row = session.opened.rows["c1"]
        row.state = "failed"
        await session.write(EventBatchWrite(moved=[row], usage={"n1": GIVE_BACK}))
        raise RuntimeError("the batch failed after its write")


async def test_a_failed_container_gives_back_its_usage_and_its_deploy_finishes_once_with_one_outbox_row(
    backend: Backend,
) -> None:
    deploy = _deploy("d1")
    await _arrange(backend, [deploy], [_container("c1", deploy)])
    event = DeployEvent(deploy_id="d1", kind="failed", failed={"c1": "image"})
    message = OutboxMessage(
        deploy_event("d1", "failed"), event, new_envelope("eru.deploy.failed", "test", message_id="e1")
    )
    async with backend.events.event_batch(INBOX, ["m1"], [("c1", "m1")]) as session:
        row = session.opened.rows["c1"]
        row.state, row.reason = "failed", "image"
        changes = EventBatchWrite(
            moved=[row],
            finished=[FinishedDeploy("d1", "failed", json.dumps({"started": [], "failed": {"c1": "image"}}))],
            messages=[message],
            usage={"n1": GIVE_BACK},
        )
        assert await session.write(changes) == {"e1"}
    assert await _used(backend, "n1") == (0, 0)
    async with backend.store.pod(POD) as session:
        stored = (await session.find_deploys(["key-d1"]))["key-d1"]
    result = json.loads(stored.result) if isinstance(stored.result, str) else stored.result
    assert stored.status == "failed"
    assert result == {"placements": {"n1": 2}, "started": [], "failed": {"c1": "image"}}, "the summary is merged in"
    async with backend.events.event_batch(INBOX, ["m2"], [("c1", "m2")]) as session:
        assert await session.write(EventBatchWrite(messages=[message])) == set(), "an event id queued before"


async def test_a_reshaped_row_keeps_its_new_allocation_and_forgets_the_previous_one(backend: Backend) -> None:
    deploy = _deploy("d1", status="completed")
    await _arrange(backend, [deploy], [_container("c1", deploy, state="updating")])
    bigger = json.dumps({"cpu_map": {"0": 80}, "memory": 128 << 20})
    async with backend.events.event_batch(INBOX, ["m1"], [("c1", "m1")]) as session:
        row = session.opened.rows["c1"]
        row.state, row.allocation, row.previous_allocation, row.reason = "running", bigger, None, "updated"
        await session.write(EventBatchWrite(reshaped=[row]))
    again = (await _read(backend, "c1"))["c1"]
    assert (again.state, again.reason, again.previous_allocation) == ("running", "updated", None)
    assert json.loads(again.allocation) == json.loads(bigger)


async def test_a_pending_replacement_and_the_container_it_replaces_are_read_together(backend: Backend) -> None:
    deploy = _deploy("d1")
    old = _container("c1", deploy, state="running")
    await _arrange(backend, [deploy], [old, _container("r1", deploy, replaces="c1"), _container("c2", deploy)])
    assert sorted(await _read(backend, "c1")) == ["c1", "r1"]
    async with backend.events.event_batch(INBOX, ["m1"], [("r1", "m1")]) as session:
        opened = session.opened
    assert sorted(opened.rows) == ["c1", "r1"]
    assert opened.rows["r1"].replaces == "c1"
    assert sorted(m.id for m in opened.members) == ["c1", "c2"], "a pending replacement is no member"


async def test_containers_no_agent_answered_for_are_overdue(backend: Backend) -> None:
    deploy = _deploy("d1")
    await _arrange(
        backend,
        [deploy],
        [
            _container("c2", deploy),
            _container("c1", deploy, state="creating"),
            _container("c3", deploy, state="running"),
            _container("r1", deploy, replaces="c3"),
        ],
    )
    assert await backend.events.overdue(30) == []
    await backend.age(60)
    assert [(row.id, row.node, row.deploy_id) for row in await backend.events.overdue(30)] == [
        ("c1", "n1", "d1"),
        ("c2", "n1", "d1"),
    ]
    assert await backend.events.overdue(600) == []


async def test_live_containers_of_silent_nodes_and_for_how_long(backend: Backend) -> None:
    deploy = _deploy("d1", status="completed")
    await _arrange(
        backend,
        [deploy],
        [
            _container("c1", deploy, state="running"),
            _container("c2", deploy),
            _container("c3", deploy, state="removed"),
            _container("r1", deploy, replaces="c1"),
            _container("c4", deploy, node="n2", state="running"),
        ],
    )
    assert await backend.events.on_silent_nodes(30) == []
    await backend.age(60)
    await backend.beat("n2")
    [silent] = await backend.events.on_silent_nodes(30)
    assert (silent.id, silent.node, silent.deploy_id) == ("c1", "n1", "d1")
    assert 60 <= silent.silent_seconds < 120
    assert await backend.events.on_silent_nodes(600) == []


def _queries(backend: Backend) -> QueryStore:
    """Where a test reads a container's health back (the queries capability over the same record)."""
    if isinstance(backend.store, InMemoryStore):
        return backend.store
    assert isinstance(backend.store, PgStore)
    return PgQueries(backend.store.pool)


async def test_health_is_written_onto_live_containers_on_the_reporting_node(backend: Backend) -> None:
    d1 = _deploy("d1")
    rows = [
        _container("c1", d1, state="running"),
        _container("c2", d1, state="running"),
        _container("c3", d1, state="removed"),
    ]
    await _arrange(backend, [d1], rows)
    await backend.events.record_health(
        [
            HealthReport("c1", "n1", "unhealthy"),
            HealthReport("c2", "n2", "healthy"),  # not the node it runs on
            HealthReport("c3", "n1", "healthy"),  # gone
            HealthReport("c9", "n1", "healthy"),  # unknown
        ]
    )
    await backend.events.record_health([])
    page = await _queries(backend).container_page(ContainerFilter(pod=POD, include_gone=True), None, 10)
    assert {row.id: row.health for row in page} == {"c1": "unhealthy", "c2": None, "c3": None}
    await backend.events.record_health([HealthReport("c1", "n1", "healthy")])
    page = await _queries(backend).container_page(ContainerFilter(container_id="c1"), None, 10)
    assert [row.health for row in page] == ["healthy"]
