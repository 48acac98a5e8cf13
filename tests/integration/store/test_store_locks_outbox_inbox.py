"""Advisory locks, the outbox (SKIP LOCKED claims) and the inbox (dedupe) against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest

from eru.store.transaction import (
    OUTBOX_CHANNEL,
    NotInTransaction,
    add_to_outbox,
    advisory_key,
    advisory_xact_lock,
    claim_outbox,
    lock_pod,
    pod_lock_key,
    prune_outbox,
    seen_before,
    transaction,
    try_advisory_xact_lock,
)


async def _waiting_advisory_locks(pool: asyncpg.Pool) -> int:
    count: int = await pool.fetchval("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
    return count


async def _eventually(predicate: object, within: float = 10.0) -> None:
    assert callable(predicate)
    deadline = asyncio.get_running_loop().time() + within
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


def test_advisory_key_is_deterministic_signed_64_bit() -> None:
    assert advisory_key("pod:a") == advisory_key("pod:a")
    assert advisory_key("pod:a") != advisory_key("pod:b")
    keys = [advisory_key(f"pod-{i}") for i in range(1000)]
    assert all(-(2**63) <= key < 2**63 for key in keys)
    assert len(set(keys)) == len(keys)
    assert pod_lock_key("a") != advisory_key("a")  # pod locks live in their own namespace


async def test_advisory_lock_excludes_a_second_connection_until_commit(store_pool: asyncpg.Pool) -> None:
    order: list[str] = []
    first_holds = asyncio.Event()
    release_first = asyncio.Event()

    async def first() -> None:
        async with transaction(store_pool) as conn:
            await advisory_xact_lock(conn, "pod:alpha")
            order.append("first locked")
            first_holds.set()
            await release_first.wait()
            order.append("first commits")

    async def second() -> None:
        await first_holds.wait()
        async with transaction(store_pool) as conn:
            await advisory_xact_lock(conn, "pod:alpha")
            order.append("second locked")

    tasks = [asyncio.create_task(first()), asyncio.create_task(second())]
    await first_holds.wait()
    await _eventually(lambda: _count_is(store_pool, 1))  # the second is queued on the lock inside PostgreSQL
    async with transaction(store_pool) as other:
        assert await try_advisory_xact_lock(other, "pod:beta")  # another key is not blocked
        assert not await try_advisory_xact_lock(other, "pod:alpha")
    assert order == ["first locked"]
    release_first.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert order == ["first locked", "first commits", "second locked"]


async def _count_is(pool: asyncpg.Pool, expected: int) -> bool:
    return await _waiting_advisory_locks(pool) == expected


async def test_pod_lock_ends_with_a_rollback(store_pool: asyncpg.Pool) -> None:
    async def lock_then_fail() -> None:
        async with transaction(store_pool) as conn:
            await lock_pod(conn, "alpha")
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await lock_then_fail()
    async with transaction(store_pool) as conn:
        assert await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", pod_lock_key("alpha"))


async def test_helpers_refuse_to_run_outside_a_transaction(store_pool: asyncpg.Pool) -> None:
    async with store_pool.acquire() as conn:
        with pytest.raises(NotInTransaction, match="advisory_xact_lock"):
            await advisory_xact_lock(conn, "pod:alpha")
        with pytest.raises(NotInTransaction, match="claim_outbox"):
            await claim_outbox(conn, 10)
        with pytest.raises(NotInTransaction, match="seen_before"):
            await seen_before(conn, "consumer", "m1")


async def _fill_outbox(pool: asyncpg.Pool, count: int) -> list[str]:
    event_ids = [f"evt-{i:04d}" for i in range(count)]
    async with transaction(pool) as conn:
        for event_id in event_ids:
            row_id = await add_to_outbox(
                conn,
                event_id=event_id,
                subject=f"eru.test.{event_id}",
                body=event_id.encode(),
                headers={"ce-id": event_id},
            )
            assert row_id is not None
    return event_ids


async def test_outbox_claims_by_overlapping_claimers_are_disjoint(store_pool: asyncpg.Pool) -> None:
    event_ids = await _fill_outbox(store_pool, 50)
    async with store_pool.acquire() as first, first.transaction():
        first_batch = await claim_outbox(first, 20)
        async with store_pool.acquire() as second, second.transaction():
            second_batch = await claim_outbox(second, 100)  # the first's rows are locked: skipped, not waited for
    assert [message.event_id for message in first_batch] == event_ids[:20]
    assert [message.event_id for message in second_batch] == event_ids[20:]
    message = first_batch[0]
    assert (message.subject, message.body, dict(message.headers)) == (
        "eru.test.evt-0000",
        b"evt-0000",
        {"ce-id": "evt-0000"},
    )
    assert await store_pool.fetchval("SELECT count(*) FROM outbox WHERE published_at IS NULL") == 0


async def test_concurrent_claimers_publish_every_row_exactly_once(store_pool: asyncpg.Pool) -> None:
    event_ids = await _fill_outbox(store_pool, 120)
    published: list[str] = []

    async def relay() -> None:
        while True:
            async with transaction(store_pool) as conn:
                batch = await claim_outbox(conn, 7)
                await asyncio.sleep(0.005)  # "publishing" while holding the rows
                published.extend(message.event_id for message in batch)
            if not batch:
                return

    await asyncio.wait_for(asyncio.gather(*(relay() for _ in range(4))), 30)
    assert sorted(published) == event_ids


async def test_outbox_rollback_returns_rows_and_duplicates_are_ignored(store_pool: asyncpg.Pool) -> None:
    await _fill_outbox(store_pool, 3)

    async def claim_then_fail_to_publish() -> None:
        async with transaction(store_pool) as conn:
            assert len(await claim_outbox(conn, 10)) == 3
            raise ConnectionError("bus down while publishing")

    with pytest.raises(ConnectionError):
        await claim_then_fail_to_publish()
    async with transaction(store_pool) as conn:
        assert await add_to_outbox(conn, event_id="evt-0000", subject="eru.other", body=b"again") is None
        again = await claim_outbox(conn, 10)
    assert [message.body for message in again] == [b"evt-0000", b"evt-0001", b"evt-0002"]
    async with store_pool.acquire() as conn:
        assert await prune_outbox(conn, older_than_seconds=3600) == 0
        await conn.execute("UPDATE outbox SET published_at = now() - interval '2 hours'")
        assert await prune_outbox(conn, older_than_seconds=3600) == 3


async def test_outbox_insert_notifies_listeners_at_commit(store_pool: asyncpg.Pool) -> None:
    woken = asyncio.Event()
    async with store_pool.acquire() as listener:
        await listener.add_listener(OUTBOX_CHANNEL, lambda *_: woken.set())
        async with transaction(store_pool) as conn:
            await add_to_outbox(conn, event_id="evt-n", subject="eru.test", body=b"x")
            await asyncio.sleep(0.2)
            assert not woken.is_set()  # nothing before commit
        await asyncio.wait_for(woken.wait(), 5)
        await listener.reset()


async def test_inbox_dedupes_and_forgets_on_rollback(store_pool: asyncpg.Pool) -> None:
    async with transaction(store_pool) as conn:
        assert await seen_before(conn, "node-agent", "msg-1") is False
        assert await seen_before(conn, "node-agent", "msg-1") is True
        assert await seen_before(conn, "eviction", "msg-1") is False  # per consumer

    async def process_then_fail() -> None:
        async with transaction(store_pool) as conn:
            assert await seen_before(conn, "node-agent", "msg-2") is False
            raise RuntimeError("processing failed")

    with pytest.raises(RuntimeError, match="processing failed"):
        await process_then_fail()
    async with transaction(store_pool) as conn:
        assert await seen_before(conn, "node-agent", "msg-2") is False  # the failed attempt left no mark
        assert await seen_before(conn, "node-agent", "msg-1") is True


async def test_inbox_concurrent_duplicate_waits_and_sees_the_first(store_pool: asyncpg.Pool) -> None:
    async with store_pool.acquire() as first, first.transaction():
        assert await seen_before(first, "allocator", "dup") is False

        async def second() -> bool:
            async with transaction(store_pool) as conn:
                return await seen_before(conn, "allocator", "dup")

        late = asyncio.create_task(second())
        await asyncio.sleep(0.3)
        assert not late.done()  # blocked on the first's uncommitted row
    assert await asyncio.wait_for(late, 10) is True


async def test_schema_rejects_negative_usage_and_unknown_states(store_pool: asyncpg.Pool) -> None:
    async with transaction(store_pool) as conn:
        await conn.execute("INSERT INTO pods (name) VALUES ('p')")
        await conn.execute(
            "INSERT INTO nodes (name, pod, cpu_map, memory) VALUES ('n1', 'p', $1::jsonb, 1024)",
            json.dumps({"0": 100, "1": 100}),
        )
    bad_updates = [
        ("UPDATE nodes SET used_memory = -1", "used_memory"),
        ("UPDATE nodes SET used_cpu_map = '{\"0\": -5}'", "used_cpu_map"),
        ('UPDATE nodes SET used_cpu_map = \'{"0": "10"}\'', "used_cpu_map"),
        ("UPDATE nodes SET used_numa_memory = '{\"0\": [1]}'", "used_numa_memory"),
        ("UPDATE nodes SET state = 'sleeping'", "state"),
        ("INSERT INTO tenants (name, weight) VALUES ('t', 0)", "weight"),
    ]
    for sql, column in bad_updates:
        with pytest.raises(asyncpg.CheckViolationError, match=column):
            await store_pool.execute(sql)
    row = await store_pool.fetchrow("SELECT used_memory, used_cpu_map, version, state FROM nodes WHERE name = 'n1'")
    assert row is not None
    assert (row["used_memory"], json.loads(row["used_cpu_map"]), row["version"], row["state"]) == (0, {}, 0, "up")
    await store_pool.execute('UPDATE nodes SET used_cpu_map = \'{"0": 50, "1": 0}\', used_memory = 512')
