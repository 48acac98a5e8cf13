"""A deploy batch never holds its pod's lock while the distributor is asked (docs/pipeline.md "The pod lock and the
distributor"), on a real PostgreSQL with a distributor that answers only when the test lets it: while the batch's
`place_batch` request is pending another session can take the pod's lock, and what that session changes is what
the batch's read under the lock finds, so the batch is decided again against it (and asks again, without the
lock) before it commits."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from eru.bus import new_envelope
from eru.bus.codec import MSGPACK, decode_value
from eru.bus.subjects import DISTRIBUTOR_PLACE_BATCH
from eru.domain import Accepted, DeployRequest
from eru.planning import PlanningConfig
from eru.store import pod_lock_key
from eru.testing.memory_bus import InMemoryBus, Message, place_batch_reply, serve_placement
from eru_allocator.deploy import decision
from eru_allocator.deploy.context import Context
from eru_allocator.deploy.pipeline import commit_batch
from eru_allocator.deploy.requests import validate
from eru_allocator.store.postgres import PgStore

POD = "nb"
CONFIG = PlanningConfig()
NODE_SQL = "INSERT INTO nodes (name, pod, cpu_map, memory, state) VALUES ($1, $2, $3::jsonb, $4, 'up')"


@pytest.fixture
async def observer(postgres_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection outside the store's pool (advisory locks are re-entrant within a session)."""
    conn = await asyncpg.connect(postgres_dsn)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def store(store_pool: asyncpg.Pool) -> PgStore:
    """The allocator's store with the test's pod and two nodes of two cores."""
    await store_pool.execute("INSERT INTO pods (name) VALUES ($1)", POD)
    for name in ("n1", "n2"):
        await store_pool.execute(NODE_SQL, name, POD, json.dumps({"0": 100, "1": 100}), 8 << 30)
    return PgStore(store_pool)


class SlowDistributor:
    """Answers `place_batch` like the distributor, once the test lets each request go; keeps what it answered."""

    def __init__(self, bus: InMemoryBus) -> None:
        self.asked: asyncio.Queue[Message] = asyncio.Queue()
        self.go: asyncio.Queue[None] = asyncio.Queue()
        self.answers: list[dict[str, Any]] = []
        self.answered = asyncio.Event()
        bus.serve(DISTRIBUTOR_PLACE_BATCH, self.answer)

    async def answer(self, message: Message) -> bytes:
        await self.asked.put(message)
        await self.go.get()
        body = place_batch_reply(message)
        self.answers.append(decode_value(body, MSGPACK))
        self.answered.set()
        return body


def _items(count: int, priority_class: str = "prod") -> list[Any]:
    items = []
    for index in range(count):
        req = DeployRequest.model_validate(
            {
                "request_id": f"nb-{index}",
                "pod": POD,
                "count": 1,
                "mode": "auto",
                "workload": {
                    "name": "web",
                    "image": "busybox",
                    "priority_class": priority_class,
                    "resources": {"cpu_bind": True, "cpu_request": 1, "memory_request": "16MiB"},
                },
            }
        )
        items.append((req, validate(req, CONFIG), new_envelope("eru.deploy.request", "test")))
    return items


async def _take_lock(conn: asyncpg.Connection) -> bool:
    return bool(await conn.fetchval("SELECT pg_try_advisory_lock($1)", pod_lock_key(POD)))


async def test_another_session_takes_the_pods_lock_while_the_distributor_is_asked(
    store: PgStore, store_pool: asyncpg.Pool, observer: asyncpg.Connection
) -> None:
    bus = InMemoryBus()
    serve_placement(bus)
    distributor = SlowDistributor(bus)
    ctx = Context(store, bus, CONFIG, "allocator/test", 30.0, 3600.0)
    batch = asyncio.create_task(commit_batch(ctx, POD, _items(1)))
    await distributor.asked.get()  # the batch's place_batch request is pending
    free = await _take_lock(observer)  # the pod's lock is free meanwhile
    if free:
        await observer.execute("SELECT pg_advisory_unlock($1)", pod_lock_key(POD))
    distributor.go.put_nowait(None)
    answers = await batch
    assert free
    assert [type(answer) for answer in answers] == [Accepted]
    assert await store_pool.fetchval("SELECT count(*) FROM containers WHERE pod = $1", POD) == 1
    await store.wait_unlocked()
    assert await _take_lock(observer)  # and free after the batch


async def test_a_change_made_under_the_lock_during_the_round_trip_is_decided_against(
    store: PgStore, store_pool: asyncpg.Pool, observer: asyncpg.Connection
) -> None:
    bus = InMemoryBus()
    serve_placement(bus)
    distributor = SlowDistributor(bus)
    ctx = Context(store, bus, CONFIG, "allocator/test", 30.0, 3600.0)
    batch = asyncio.create_task(commit_batch(ctx, POD, _items(1)))
    await distributor.asked.get()
    async with observer.transaction():  # another holder of the pod's lock cordons the node the batch chose
        taken = await observer.fetchval("SELECT pg_try_advisory_xact_lock($1)", pod_lock_key(POD))
        distributor.go.put_nowait(None)
        if not taken:  # held by the batch across the round trip: let it finish, and fail
            await batch
        assert taken
        await distributor.answered.wait()  # answered; the batch now waits for the lock this transaction holds
        (chosen,) = distributor.answers[0]["results"][0]["placements"]
        await observer.execute("UPDATE nodes SET cordoned = true WHERE name = $1", chosen)
    await distributor.asked.get()  # decided again under the lock against the cordon: its new ask, without the lock
    assert await _take_lock(observer)
    await observer.execute("SELECT pg_advisory_unlock($1)", pod_lock_key(POD))
    distributor.go.put_nowait(None)
    answers = await batch
    assert [type(answer) for answer in answers] == [Accepted]
    nodes = [row["node"] for row in await store_pool.fetch("SELECT node FROM containers WHERE pod = $1", POD)]
    assert nodes == [{"n1": "n2", "n2": "n1"}[chosen]]


@pytest.mark.parametrize("priority_class", ["prod", "batch"])
async def test_a_batch_the_pod_did_not_change_under_is_decided_once(
    store: PgStore, store_pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch, priority_class: str
) -> None:
    """Read without the lock, then under it: nothing changed in between, so the first decision stands. A batch-class
    batch's snapshot carries its eviction memory read at PostgreSQL's `now` (a new instant each read): that instant
    alone is no change of the pod."""
    decided: list[int] = []
    plan_batch = decision.plan_batch

    async def counting(*args: Any, **kwargs: Any) -> Any:
        decided.append(len(args[4]))
        return await plan_batch(*args, **kwargs)

    monkeypatch.setattr(decision, "plan_batch", counting)
    bus = InMemoryBus()
    serve_placement(bus)
    ctx = Context(store, bus, CONFIG, "allocator/test", 30.0, 3600.0)
    answers = await commit_batch(ctx, POD, _items(3, priority_class))
    assert [type(answer) for answer in answers] == [Accepted] * 3
    assert await store_pool.fetchval("SELECT count(*) FROM containers WHERE pod = $1", POD) == 3
    assert decided == [3]  # decided once, before the lock; not again under it
