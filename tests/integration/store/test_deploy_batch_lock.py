"""A deploy batch holds its pod's lock at the session level, with no transaction of its own (`PgStore.deploy_batch`,
migration 0170, docs/store.md "A deploy batch in two round trips"), on a real PostgreSQL: the lock is held from
`open_batch` until after the block, `submit` commits as it writes and the next holder reads what it wrote, and the
lock never outlives its batch — not after an error, a cancellation while waiting for it, or an unlock that fails."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import pytest

from eru.planning import PlanningConfig
from eru.store import pod_lock_key
from eru.store.protocol import DecisionRow, DeployRow, PodWrites, SnapshotNeeds, WaitRow
from eru_allocator.store.postgres import PgStore

POD = "lk"
NEEDS = SnapshotNeeds(PlanningConfig(), 30.0)
HELD_SQL = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
WAITING_SQL = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"


@pytest.fixture
async def observer(postgres_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection of its own, outside the store's pool: a pooled one could be the very session holding the lock
    (advisory locks are re-entrant within a session)."""
    conn = await asyncpg.connect(postgres_dsn)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def store(store_pool: asyncpg.Pool) -> PgStore:
    """The allocator's store on a database with the test's pod."""
    await store_pool.execute("INSERT INTO pods (name) VALUES ($1)", POD)
    return PgStore(store_pool)


def _writes(key: str) -> PodWrites:
    writes = PodWrites()
    writes.decisions.append(DecisionRow(f"x-{key}", "deploy", "{}", "{}"))
    writes.deploys.append(DeployRow(f"d-{key}", key, POD, "default", "completed", "{}", json.dumps({"placements": {}})))
    return writes


async def _eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    for _ in range(500):
        if await check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


async def _free(conn: asyncpg.Connection) -> bool:
    """Whether another session can take the pod's lock now (taken and given back at once)."""
    taken = bool(await conn.fetchval("SELECT pg_try_advisory_lock($1)", pod_lock_key(POD)))
    if taken:
        await conn.execute("SELECT pg_advisory_unlock($1)", pod_lock_key(POD))
    return taken


async def test_the_lock_is_held_from_open_batch_until_after_the_block(
    store_pool: asyncpg.Pool, store: PgStore, observer: asyncpg.Connection
) -> None:
    async with store.deploy_batch(POD) as session:
        assert await _free(observer)  # nothing asked yet
        await session.open_batch(["k1"], NEEDS)
        assert not session.conn.is_in_transaction()
        assert not await _free(observer)
        await session.submit(_writes("k1"))
        assert not await _free(observer)  # committed, still locked: the answers go out first
    await store.wait_unlocked()
    assert await _free(observer)
    assert await observer.fetchval(HELD_SQL) == 0


async def test_the_next_holder_reads_what_the_previous_one_committed(
    store_pool: asyncpg.Pool, store: PgStore, observer: asyncpg.Connection
) -> None:
    """Two replicas' batches of one pod: the second waits for the lock inside its read and then finds the first's
    request key, which the first committed with `submit` before letting the lock go."""
    first, second = store, PgStore(store_pool)
    async with first.deploy_batch(POD) as session:
        await session.open_batch(["k1"], NEEDS)

        async def read_second() -> set[str]:
            async with second.deploy_batch(POD) as other:
                _, existing, _ = await other.open_batch(["k1"], NEEDS)
                return set(existing)

        waiting = asyncio.create_task(read_second())
        await _eventually(lambda: _count(store_pool, WAITING_SQL, 1), "the second batch waits for the lock")
        await session.submit(_writes("k1"))
        assert not waiting.done()
    assert await waiting == {"k1"}
    await first.wait_unlocked()
    await second.wait_unlocked()
    assert await _free(observer)


async def _count(pool: asyncpg.Pool, query: str, expected: int) -> bool:
    return bool(await pool.fetchval(query) == expected)


async def test_a_batch_that_raises_lets_the_lock_go_before_the_error_propagates(
    store_pool: asyncpg.Pool, store: PgStore, observer: asyncpg.Connection
) -> None:

    async def batch() -> None:
        async with store.deploy_batch(POD) as session:
            await session.open_batch(["k1"], NEEDS)
            raise RuntimeError("planning broke")

    with pytest.raises(RuntimeError, match="planning broke"):
        await batch()
    assert await _free(observer)  # without waiting for anything in the background
    assert await store_pool.fetchval("SELECT count(*) FROM deploys") == 0


async def test_a_batch_cancelled_while_it_holds_the_lock_lets_it_go(
    store_pool: asyncpg.Pool, store: PgStore, observer: asyncpg.Connection
) -> None:
    """As a stopping allocator cancels a batch that waits for the distributor's answer under the lock."""
    locked = asyncio.Event()

    async def batch() -> None:
        async with store.deploy_batch(POD) as session:
            await session.open_batch(["k1"], NEEDS)
            locked.set()
            await asyncio.Event().wait()  # the distributor never answers

    task = asyncio.create_task(batch())
    await locked.wait()
    assert not await _free(observer)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _free(observer)
    assert await observer.fetchval(HELD_SQL) == 0


async def test_a_batch_cancelled_while_waiting_for_the_lock_leaves_it_free(
    store_pool: asyncpg.Pool, store: PgStore, observer: asyncpg.Connection
) -> None:
    holder = await store_pool.acquire()
    try:
        await holder.execute("SELECT pg_advisory_lock($1)", pod_lock_key(POD))

        async def batch() -> None:
            async with store.deploy_batch(POD) as session:
                await session.open_batch(["k1"], NEEDS)

        task = asyncio.create_task(batch())
        await _eventually(lambda: _count(store_pool, WAITING_SQL, 1), "the batch waits for the lock")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await holder.execute("SELECT pg_advisory_unlock($1)", pod_lock_key(POD))
    finally:
        await store_pool.release(holder)
    # the cancelled read may have been granted the lock before its cancel reached the server: never kept
    await _eventually(lambda: _count(store_pool, WAITING_SQL, 0), "no one waits")
    assert await _free(observer)
    assert await observer.fetchval(HELD_SQL) == 0
    async with store.deploy_batch(POD) as session:  # the pod is usable again
        await session.open_batch(["k2"], NEEDS)
        await session.submit(_writes("k2"))
    await store.wait_unlocked()
    assert await _free(observer)


async def test_an_unlock_that_fails_closes_the_connection_and_so_frees_the_lock(
    store_pool: asyncpg.Pool, store: PgStore, observer: asyncpg.Connection
) -> None:
    async with store.deploy_batch(POD) as session:
        await session.open_batch(["k1"], NEEDS)
        await session.submit(_writes("k1"))
        session.conn.terminate()  # as if the socket broke after the commit: the unlock cannot be sent
    await store.wait_unlocked()
    # the server ends the session (and its locks) when its backend reads the closed socket: after the client's
    # close, not at it, so the observer waits for that, as the next batch on the pod would
    await _eventually(lambda: _free(observer), "the server ends the closed session and frees its lock")
    assert await store_pool.fetchval("SELECT count(*) FROM deploys") == 1


async def test_a_batch_with_admission_waits_writes_all_or_nothing(
    store_pool: asyncpg.Pool, store: PgStore, observer: asyncpg.Connection
) -> None:
    """Rows and waits are three statements: a batch with waits opens a transaction for them, so a wait that fails
    takes the batch's rows with it."""
    writes = _writes("k1")
    writes.waits.append(WaitRow("d-w", "k-w", POD, "default", 30.0, "not json", "{}", "{}"))

    async def batch() -> None:
        async with store.deploy_batch(POD) as session:
            await session.open_batch(["k1", "k-w"], NEEDS)
            await session.submit(writes)

    with pytest.raises(asyncpg.DataError):
        await batch()
    assert await store_pool.fetchval("SELECT count(*) FROM deploys") == 0
    assert await store_pool.fetchval("SELECT count(*) FROM deploy_waits") == 0
    assert await _free(observer)
    good = _writes("k2")
    good.waits.append(WaitRow("d-w", "k-w", POD, "default", 30.0, "{}", "{}", "{}"))
    async with store.deploy_batch(POD) as session:
        await session.open_batch(["k2", "k-w"], NEEDS)
        await session.submit(good)
    await store.wait_unlocked()
    assert await store_pool.fetchval("SELECT count(*) FROM deploys") == 1
    assert await store_pool.fetchval("SELECT count(*) FROM deploy_waits") == 1
