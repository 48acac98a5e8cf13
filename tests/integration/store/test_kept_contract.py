"""The kept instances capability's contract (`eru.store.kept.KeptInstanceStore`, docs/store.md "The contract suite"),
run against the in-memory store (`eru.testing.memory_store`) and against `PgKeptInstances` on a real PostgreSQL, like
httpx's transports: what the keeper's unit tests learn on the fake holds on the database.

Deploys and containers are arranged through the deploy path's protocol (`AllocatorStore`: a pod session's `submit`)
and containers end through the container events capability (state and reason written by a batch); then the cases
speak only the keeper's verbs: one round at a time, first instances of `keep` deploys adopted once, an instance gone,
waiting until due, placing, and running again, a round that raises, evictions recorded once with their lineage, the
round's messages queued.
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
from eru.domain import DeployEvent
from eru.planning import NodeResources
from eru.store.container_events import ContainerEventStore, EventBatchWrite
from eru.store.kept import KeptInstanceStore
from eru.store.pool import create_pool
from eru.store.protocol import AllocatorStore, ContainerRow, DeployRow, OutboxMessage, PodWrites
from eru.testing.memory_store import InMemoryStore
from eru_allocator.store.container_store import PgContainerEvents
from eru_allocator.store.kept_store import PgKeptInstances
from eru_allocator.store.postgres import PgStore

POD = "cp"
MARK = " eviction (decision "
REQUEST = {
    "pod": POD,
    "workload": {"name": "job", "image": "busybox", "priority_class": "batch"},
    "count": 2,
    "keep": True,
}


@dataclass
class Backend:
    """A store under contract and what a test inspects outside the capability."""

    name: str
    store: AllocatorStore
    events: ContainerEventStore
    kept: KeptInstanceStore
    evictions: Callable[[], Awaitable[list[tuple[str, str, str]]]]
    """(lineage, workload, node) of every recorded eviction, by lineage."""
    outbox_ids: Callable[[], Awaitable[set[str]]]


def _memory() -> Backend:
    store = InMemoryStore()
    store.add_pod(POD)

    async def evictions() -> list[tuple[str, str, str]]:
        return sorted((e.instance, e.workload, e.node) for e in store.evictions)

    async def outbox_ids() -> set[str]:
        return {message.envelope.id for message in store.outbox}

    return Backend("memory", store, store, store, evictions, outbox_ids)


def _postgres(pool: asyncpg.Pool) -> Backend:
    async def evictions() -> list[tuple[str, str, str]]:
        rows = await pool.fetch("SELECT lineage, workload, node FROM evictions ORDER BY lineage")
        return [(row["lineage"], row["workload"], row["node"]) for row in rows]

    async def outbox_ids() -> set[str]:
        return {row["event_id"] for row in await pool.fetch("SELECT event_id FROM outbox")}

    return Backend("postgres", PgStore(pool), PgContainerEvents(pool), PgKeptInstances(pool), evictions, outbox_ids)


@pytest_asyncio.fixture
async def backend(database: str | None) -> AsyncIterator[Backend]:
    """The in-memory store, then PostgreSQL on the test's database."""
    if database is None:
        yield _memory()
        return
    pool = await create_pool(database, min_size=1, max_size=4)
    try:
        await pool.execute("INSERT INTO pods (name) VALUES ($1)", POD)
        await pool.execute(
            "INSERT INTO nodes (name, pod, cpu_map, memory) VALUES ('n1', $1, '{\"0\": 100}'::jsonb, 1073741824)", POD
        )
        yield _postgres(pool)
    finally:
        await pool.close()


def _deploy(deploy_id: str, request: dict[str, object], request_id: str | None = None) -> DeployRow:
    return DeployRow(deploy_id, request_id or f"key-{deploy_id}", POD, "acme", "completed", json.dumps(request), "{}")


def _container(cid: str, deploy_id: str, state: str = "running", replaces: str | None = None) -> ContainerRow:
    return ContainerRow(
        cid, deploy_id, "n1", POD, "job", "busybox", "acme", "batch", 0, '{"cpu_map": {}}', "{}", state, "{}", replaces
    )


async def _arrange(backend: Backend, deploys: list[DeployRow], containers: list[ContainerRow]) -> None:
    if isinstance(backend.store, InMemoryStore) and "n1" not in backend.store.nodes:
        backend.store.add_node(POD, NodeResources("n1", {"0": 100}, 1 << 30))
    async with backend.store.pod(POD) as session:
        await session.submit(PodWrites(deploys=deploys, containers=containers))


async def _end(backend: Backend, cid: str, state: str, reason: str) -> None:
    """Container `cid` moves to `state` with `reason`, as a batch of events writes it."""
    message = f"end-{cid}"
    async with backend.events.event_batch("contract-kept", [message], [(cid, message)]) as session:
        row = session.opened.rows[cid]
        row.state, row.reason = state, reason
        await session.write(EventBatchWrite(moved=[row]))


async def test_one_round_at_a_time(backend: Backend) -> None:
    async with backend.kept.keeper_round() as first:
        assert first is not None
        async with backend.kept.keeper_round() as second:
            assert second is None, "another replica holds the keeper's lock"
    async with backend.kept.keeper_round() as again:
        assert again is not None


async def test_first_instances_of_keep_deploys_are_adopted_once_and_found_when_gone(backend: Backend) -> None:
    once = {**REQUEST, "keep": False}
    containers = [_container("c1", "d1"), _container("c2", "d1"), _container("r2", "d1", "planned", replaces="c2")]
    await _arrange(backend, [_deploy("d1", REQUEST), _deploy("d2", once)], [*containers, _container("c3", "d2")])
    for cid in ("c1", "r2", "c3"):
        await _end(backend, cid, "failed", "oom")
    async with backend.kept.keeper_round() as kept:
        assert kept is not None
        await kept.adopt()
        await kept.adopt()
        gone = await kept.gone()
    assert [(g.lineage, g.deploy_id, g.workload, g.container_id, g.state, g.reason, g.evictions) for g in gone] == [
        ("c1", "d1", "job", "c1", "failed", "oom", [])
    ]


async def test_an_instance_waits_until_due_is_placed_and_runs_again(backend: Backend) -> None:
    await _arrange(backend, [_deploy("d1", REQUEST)], [_container("c1", "d1")])
    await _end(backend, "c1", "lost", "node down")
    async with backend.kept.keeper_round() as kept:
        assert kept is not None
        await kept.adopt()
        [gone] = await kept.gone()
        due_at = kept.now + 10
        await kept.move(gone.lineage, "waiting", due_at, [1.0])
    async with backend.kept.keeper_round() as kept:
        assert kept is not None
        assert await kept.gone() == []
        assert await kept.due(due_at - 1) == []
        [due] = await kept.due(due_at + 1)
        assert (due.lineage, due.deploy_id, due.evictions, due.generation) == ("c1", "d1", [1.0], 0)
        assert due.request.keep is True
        assert due.request.workload.name == "job"
        await kept.move("c1", "placing", None, [1.0], request_id="keep-c1-1", next_generation=True)
    async with backend.kept.keeper_round() as kept:
        assert kept is not None
        [placing] = await kept.placing()
        assert placing == type(placing)("c1", "d1", "keep-c1-1", [1.0], None, None), "no deploy for it yet"
    await _arrange(backend, [_deploy("d9", {**REQUEST, "keep": False}, "keep-c1-1")], [_container("k1", "d9")])
    async with backend.kept.keeper_round() as kept:
        assert kept is not None
        [placing] = await kept.placing()
        assert (placing.status, placing.container_id) == ("completed", "k1")
        await kept.move("c1", "running", None, [1.0], container_id="k1")
    async with backend.kept.keeper_round() as kept:
        assert kept is not None
        assert await kept.placing() == []
        assert await kept.gone() == [], "k1 runs"
        assert await kept.due(due_at + 1_000) == []
    await _end(backend, "k1", "failed", "exit 1")
    async with backend.kept.keeper_round() as kept:
        assert kept is not None
        [gone] = await kept.gone()
    assert (gone.lineage, gone.container_id, gone.evictions) == ("c1", "k1", [1.0])


async def test_a_round_that_raises_leaves_nothing_behind(backend: Backend) -> None:
    await _arrange(backend, [_deploy("d1", REQUEST)], [_container("c1", "d1")])
    await _end(backend, "c1", "failed", "oom")
    with pytest.raises(RuntimeError, match="round failed"):
        await _adopt_then_fail(backend.kept)
    async with backend.kept.keeper_round() as kept:
        assert kept is not None
        assert await kept.gone() == [], "not adopted"
        await kept.adopt()
    with pytest.raises(RuntimeError, match="round failed"):
        await _move_then_fail(backend.kept)
    async with backend.kept.keeper_round() as kept:
        assert kept is not None
        assert [g.lineage for g in await kept.gone()] == ["c1"], "still running on the keeper's books"
    assert await backend.outbox_ids() == set()


async def _adopt_then_fail(store: KeptInstanceStore) -> None:
    async with store.keeper_round() as kept:
        assert kept is not None
        await kept.adopt()
        raise RuntimeError("the round failed")


async def _move_then_fail(store: KeptInstanceStore) -> None:
    async with store.keeper_round() as kept:
        assert kept is not None
        await kept.move("c1", "done", None, [])
        await kept.queue([_message("e1")])
        raise RuntimeError("the round failed")


def _message(event_id: str) -> OutboxMessage:
    event = DeployEvent(deploy_id="d1", kind="keep")
    return OutboxMessage(
        deploy_event("d1", "keep"), event, new_envelope("eru.deploy.keep", "test", message_id=event_id)
    )


async def test_evictions_are_recorded_once_with_their_lineage_and_messages_are_queued(backend: Backend) -> None:
    await _arrange(
        backend,
        [_deploy("d1", REQUEST)],
        [_container("c1", "d1"), _container("c2", "d1"), _container("c3", "d1")],
    )
    await _end(backend, "c1", "removed", f"evicted by node n1:{MARK}x1)")
    await _end(backend, "c2", "removed", "removed by operator")
    async with backend.kept.keeper_round() as kept:
        assert kept is not None
        await kept.adopt()
        await kept.move("c3", "running", None, [], container_id="k3")
    await _arrange(backend, [], [_container("k3", "d1")])
    await _end(backend, "k3", "removed", f"evicted:{MARK}x2)")
    for _ in range(2):
        async with backend.kept.keeper_round() as kept:
            assert kept is not None
            await kept.record_evictions(MARK, 600.0)
            await kept.queue([_message("e1"), _message("e2")])
    assert await backend.evictions() == [("c1", "job", "n1"), ("c3", "job", "n1")]
    assert await backend.outbox_ids() == {"e1", "e2"}
