"""Retention on a real PostgreSQL (eru.store.retention): finished rows move to partitioned history, expired partitions
are dropped whole and recorded, live state is never touched, a lookup past retention says when it expired."""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import timedelta

import asyncpg
import pytest

from eru.bus import new_id
from eru.store.decisions import full_input
from eru.store.retention import (
    bucket_seconds,
    collect,
    expired_at,
    id_time,
    partitions,
    partitions_to_create,
    partitions_to_drop,
    storage,
)

NODE_SQL = "INSERT INTO nodes (name, pod, cpu_map, memory) VALUES ('n1', 'p1', '{\"0\": 100}', 1073741824)"
DEPLOY_SQL = (
    "INSERT INTO deploys (id, request_id, pod, tenant, status, request) VALUES ($1, $2, 'p1', 'default', $3, '{}')"
)
CONTAINER_SQL = """INSERT INTO containers (id, deploy_id, node, pod, workload, image, tenant, class, state)
VALUES ($1, $2, 'n1', 'p1', 'w', 'busybox', 'default', 'prod', $3)"""


async def _fill(pool: asyncpg.Pool) -> dict[str, str]:
    await pool.execute("INSERT INTO pods (name) VALUES ('p1')")
    await pool.execute(NODE_SQL)
    ids = {name: new_id() for name in ("done", "running", "mixed", "planned", "decision")}
    await pool.execute(DEPLOY_SQL, ids["done"], "req-done", "completed")
    await pool.execute(DEPLOY_SQL, ids["running"], "req-running", "completed")
    await pool.execute(DEPLOY_SQL, ids["mixed"], "req-mixed", "partial")
    await pool.execute(DEPLOY_SQL, ids["planned"], "req-planned", "planned")
    await pool.execute(CONTAINER_SQL, "c-done-1", ids["done"], "removed")
    await pool.execute(CONTAINER_SQL, "c-done-2", ids["done"], "failed")
    await pool.execute(CONTAINER_SQL, "c-running", ids["running"], "running")
    await pool.execute(CONTAINER_SQL, "c-mixed-gone", ids["mixed"], "removed")
    await pool.execute(CONTAINER_SQL, "c-mixed-live", ids["mixed"], "stopping")
    await pool.execute(CONTAINER_SQL, "c-planned-failed", ids["planned"], "failed")  # its deploy still waits
    await pool.execute(
        "INSERT INTO decisions (id, kind, input, output) VALUES ($1, 'deploy', '{}', '{}')", ids["decision"]
    )
    return ids


async def test_a_pass_moves_finished_rows_and_leaves_live_state_alone(store_pool: asyncpg.Pool) -> None:
    ids = await _fill(store_pool)
    now = await store_pool.fetchval("SELECT now()")
    dry = await collect(store_pool, 3600, dry_run=True, at=now + timedelta(seconds=600))
    assert dry.moved == {"containers": 3, "deploys": 0}  # deploys move once their containers have
    report = await collect(store_pool, 3600, at=now + timedelta(seconds=600))
    assert report.ran
    assert report.moved == {"containers": 3, "deploys": 1}
    live = {row["id"] for row in await store_pool.fetch("SELECT id FROM containers")}
    assert live == {"c-running", "c-mixed-live", "c-planned-failed"}
    history = {row["id"] for row in await store_pool.fetch("SELECT id FROM containers_history")}
    assert history == {"c-done-1", "c-done-2", "c-mixed-gone"}
    assert await store_pool.fetchval("SELECT id FROM deploys_history") == ids["done"]
    record = await store_pool.fetchval("SELECT record FROM containers_history WHERE id = 'c-done-1'")
    assert '"state": "removed"' in record  # the whole row, as it was
    # partitions now cover the present and the buckets ahead, for every retained table
    for table in ("decisions", "containers_history", "deploys_history"):
        ranges = [p for p in await partitions(store_pool, table) if not p.is_default and p.range_from is not None]
        assert ranges, table
    again = await collect(store_pool, 3600, at=now + timedelta(seconds=600))
    assert again.moved == {"containers": 0, "deploys": 0}
    assert again.created == []


async def test_expired_partitions_are_dropped_whole_and_a_lookup_says_when(store_pool: asyncpg.Pool) -> None:
    ids = await _fill(store_pool)
    now = await store_pool.fetchval("SELECT now()")
    await collect(store_pool, 60, at=now)  # partitions for now and ahead
    await store_pool.execute("INSERT INTO decisions (id, kind, input) VALUES ($1, 'deploy', '{}')", new_id())
    later = now + timedelta(seconds=60 + 5 * bucket_seconds(60))
    report = await collect(store_pool, 60, at=later)
    dropped = {d["partition"] for d in report.dropped}
    assert "decisions_before_retention" in dropped
    assert sum(d["rows"] for d in report.dropped if d["table"] == "decisions") == 2
    assert await store_pool.fetchval("SELECT count(*) FROM decisions") == 0
    assert await store_pool.fetchval("SELECT count(*) FROM containers_history") == 0
    gone = await expired_at(store_pool, "decisions", ids["decision"])
    assert gone is not None
    assert await expired_at(store_pool, "decisions", "not-a-uuid7") is None
    # live state is untouched by any pass
    assert await store_pool.fetchval("SELECT count(*) FROM containers WHERE state IN ('running', 'stopping')") == 2
    assert await store_pool.fetchval("SELECT count(*) FROM nodes") == 1
    sizes = {usage.name: usage for usage in await storage(store_pool)}
    assert sizes["containers"].bytes > 0
    assert sizes["decisions"].bytes > 0  # the partitions ahead


async def test_two_passes_at_once_run_one_at_a_time(store_pool: asyncpg.Pool) -> None:
    await _fill(store_pool)
    async with store_pool.acquire() as holder, holder.transaction():
        await holder.execute("SELECT pg_advisory_xact_lock(hashtextextended('x', 0))")
        from eru.store.retention import GC_LOCK
        from eru.store.transaction import try_advisory_xact_lock

        assert await try_advisory_xact_lock(holder, GC_LOCK)
        report = await collect(store_pool, 3600)
        assert not report.ran


def test_partition_ranges_are_computed_from_what_exists() -> None:
    from datetime import UTC, datetime

    from eru.store.retention import Partition

    now = datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC)
    wanted = partitions_to_create([], now, 60)
    assert [start.minute for start, _ in wanted] == [0, 1, 2, 3]  # the bucket of now and three ahead
    assert wanted[0][0] == datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    existing = [Partition("t", "t_a", None, wanted[1][0]), Partition("t", "t_d", None, None, is_default=True)]
    assert partitions_to_create(existing, now, 60)[0][0] == wanted[1][0]
    assert partitions_to_drop(existing, now + timedelta(seconds=3600), 600) == [existing[0]]
    assert partitions_to_drop(existing, now, 600) == []


async def test_partitions_created_while_decisions_are_written_lose_no_insert(store_pool: asyncpg.Pool) -> None:
    """The soak's first pass: decisions going to the default partition while their partition is created and
    attached. Before the table lock, some inserts failed with "violates partition constraint"."""
    import asyncio

    stop = asyncio.Event()
    written = 0

    async def writer() -> None:
        nonlocal written
        while not stop.is_set():
            await store_pool.execute(
                "INSERT INTO decisions (id, kind, input, output) VALUES ($1, 'deploy', '{}', '{}')", new_id()
            )
            written += 1

    writers = [asyncio.create_task(writer()) for _ in range(4)]
    try:
        for retention in (3600, 600, 60):  # three passes, each adding partitions of another width
            report = await collect(store_pool, retention)
            assert report.ran
    finally:
        stop.set()
        results = await asyncio.gather(*writers, return_exceptions=True)
    assert [r for r in results if r is not None] == []
    assert await store_pool.fetchval("SELECT count(*) FROM decisions") == written + 0  # nothing lost or duplicated
    assert await store_pool.fetchval("SELECT count(*) FROM decisions_default") == 0


async def test_a_partition_is_made_while_a_transaction_reads_then_writes_the_table(store_pool: asyncpg.Pool) -> None:
    """A deploy's transaction reads the partitioned table (every partition, the default one too) and then inserts.
    A partition created meanwhile used to lock the parent lightly, wait at the attach for the default partition the
    reader held, while the reader's insert waited for the parent: a lock cycle that only the DDL's 300 ms
    `lock_timeout` ended — every pass stalled deploys and the partition was never made (the soak's trace)."""
    import asyncio
    from datetime import UTC, datetime

    from eru.store.retention import _create

    start = datetime(2099, 1, 1, tzinfo=UTC)
    async with store_pool.acquire() as reader, store_pool.acquire() as ddl:
        ddl_pid = ddl.get_server_pid()
        async with reader.transaction():
            await reader.fetchval("SELECT count(*) FROM decisions WHERE id = 'nobody'")  # locks every partition
            creating = asyncio.create_task(
                _create(ddl, "decisions", "created_at", "decisions_default", start, start + timedelta(hours=1))
            )
            waiting_sql = "SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted"
            for _ in range(500):  # until the DDL waits for the reader's locks
                if creating.done() or await store_pool.fetchval(waiting_sql, ddl_pid):
                    break
                await asyncio.sleep(0.01)
            await reader.execute(
                "INSERT INTO decisions (id, kind, input, output) VALUES ($1, 'deploy', '{}', '{}')", new_id()
            )
        name = await creating  # before: asyncpg.LockNotAvailableError (lock timeout) — the partition never made
    assert name == f"decisions_p{int(start.timestamp())}"
    assert any(p.name == name for p in await partitions(store_pool, "decisions"))
    assert await store_pool.fetchval("SELECT count(*) FROM decisions") == 1


async def test_storage_counts_rows_written_since_the_last_analyze(store_pool: asyncpg.Pool) -> None:
    """`eru status` showed `~0` rows for a containers table holding 4,000 (the planner's reltuples before the first
    autovacuum); the counts come from the statistics collector, which counts every committed insert and delete."""
    await _fill(store_pool)
    await store_pool.execute(
        "INSERT INTO containers (id, deploy_id, node, pod, workload, image, tenant, class, state) "
        "SELECT 'bulk-' || i, (SELECT id FROM deploys LIMIT 1), 'n1', 'p1', 'w', 'busybox', 'default', 'prod', "
        "'running' FROM generate_series(1, 300) AS i"
    )
    await store_pool.execute("DELETE FROM containers WHERE id = 'bulk-1'")
    await store_pool.execute("SELECT pg_stat_force_next_flush()")  # this session's counts, now (they flush ≤ 1 s)
    sizes = {usage.name: usage for usage in await storage(store_pool)}
    assert sizes["containers"].rows_estimate == 6 + 299


async def test_a_pass_needs_one_connection_of_the_pool(postgres_dsn: str) -> None:
    """With `store.pool_max` 1 or 2 a pass took its lock on one connection and waited forever for a second (and a
    third) one: the allocator's retention wedged while holding the lock, and every other replica skipped its passes."""
    pool = await asyncpg.create_pool(postgres_dsn, min_size=1, max_size=1)
    try:
        await _fill(pool)
        now = await pool.fetchval("SELECT now()")
        report = await asyncio.wait_for(collect(pool, 3600, at=now + timedelta(seconds=600)), 60)  # a guard, not a time
        assert report.ran
        assert report.moved == {"containers": 3, "deploys": 1}
        dry = await asyncio.wait_for(collect(pool, 3600, dry_run=True, at=now + timedelta(seconds=600)), 60)
        assert dry.ran
    finally:
        await pool.close()


async def test_past_retention_names_the_partition_its_record_was_in(store_pool: asyncpg.Pool) -> None:
    """ "expired at …" quoted the range of the partition dropped before the record's own (a minute of slack matched
    both): "dropped the decisions made before 07:28" for a decision made at 07:29."""
    now = await store_pool.fetchval("SELECT now()")
    await collect(store_pool, 60, at=now)
    made = new_id()
    await store_pool.execute("INSERT INTO decisions (id, kind, input) VALUES ($1, 'deploy', '{}')", made)
    await collect(store_pool, 60, at=now + timedelta(seconds=60 + 5 * bucket_seconds(60)))
    gone = await expired_at(store_pool, "decisions", made)
    assert gone is not None
    created = id_time(made)
    assert created is not None
    assert gone[1] > created


async def test_a_pass_cancelled_while_it_holds_the_lock_leaves_it_free(postgres_dsn: str) -> None:
    """The pass's lock is a session lock on a pooled connection; pools reset nothing on release (docs/store.md
    "Connecting"), so a pass cancelled while it waits (a table locked by a long transaction) must not leave the lock
    with the connection: the next pass on the same pool runs."""
    pool = await asyncpg.create_pool(postgres_dsn, min_size=1, max_size=1, reset=_no_reset)
    blocker = await asyncpg.connect(postgres_dsn)
    try:
        await _fill(pool)
        now = await pool.fetchval("SELECT now()")
        holding = blocker.transaction()
        await holding.start()
        await blocker.execute("LOCK TABLE containers IN ACCESS EXCLUSIVE MODE")  # the pass's first move waits on it
        task = asyncio.create_task(collect(pool, 3600, at=now + timedelta(seconds=600)))
        # until the pass holds its lock and waits for the table
        waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'relation' AND NOT granted"
        while not await blocker.fetchval(waiting):  # noqa: ASYNC110 -- polling PostgreSQL, no event to wait on
            await asyncio.sleep(0.05)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await holding.rollback()
        assert await _free_for_another_session(blocker)
        again = await asyncio.wait_for(collect(pool, 3600, at=now + timedelta(seconds=600)), 60)  # a guard
        assert again.ran
        assert again.moved == {"containers": 3, "deploys": 1}
        assert await _free_for_another_session(blocker)  # …and after a pass that ran to its end
    finally:
        await blocker.close()
        await pool.close()


async def _no_reset(conn: asyncpg.Connection) -> None:
    """As eru.store.create_pool: nothing runs on release."""


async def _free_for_another_session(conn: asyncpg.Connection) -> bool:
    from eru.store.retention import GC_LOCK
    from eru.store.transaction import advisory_key

    taken = bool(await conn.fetchval("SELECT pg_try_advisory_lock($1)", advisory_key(GC_LOCK)))
    if taken:
        await conn.execute("SELECT pg_advisory_unlock($1)", advisory_key(GC_LOCK))
    return taken


async def test_a_decision_never_outlives_its_snapshot_and_past_retention_says_expired(store_pool: asyncpg.Pool) -> None:
    """`decisions` and `decision_snapshots` are partitioned separately, their boundaries need not line up (a database
    migrated with decisions already in it starts `decisions` at the migration's moment): `eru replay` of a live
    decision answered "snapshot … is not recorded" for up to a partition's width. The snapshots are kept one
    partition longer; and a snapshot that is gone says when it expired."""
    from eru.errors import InvalidInput
    from eru.store.decisions import decision_input

    now = await store_pool.fetchval("SELECT now()")
    await collect(store_pool, 300, at=now)
    decision, snapshot = new_id(), new_id()
    problem = json.dumps({"snapshot": snapshot, "nodes": [], "request": {}})
    async with store_pool.acquire() as conn, conn.transaction():  # as the allocator writes them: one transaction
        await conn.execute("INSERT INTO decision_snapshots (id, nodes) VALUES ($1, '{}')", snapshot)
        await conn.execute("INSERT INTO decisions (id, kind, input) VALUES ($1, 'deploy', $2)", decision, problem)
    holding = "SELECT max(upper) FROM (SELECT tableoid::regclass::text AS part FROM {0} WHERE id = $1) t, " + (
        "LATERAL (SELECT (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \\(''([^'']+)''\\)'))[1]"
        "::timestamptz AS upper FROM pg_class c WHERE c.oid = t.part::regclass) b"
    )
    ends = [await store_pool.fetchval(holding.format(table), key) for table, key in (("decisions", decision),
            ("decision_snapshots", snapshot))]  # fmt: skip
    assert ends[0] != ends[1]  # the two partitions end at different moments: the case this test is about
    for end in sorted(ends):  # the first moment a pass may drop each of them, and a moment after
        for late in (end + timedelta(seconds=300), end + timedelta(seconds=300.5)):
            await collect(store_pool, 300, at=late)
            if await store_pool.fetchval("SELECT count(*) FROM decisions WHERE id = $1", decision):
                assert await decision_input(store_pool, decision) is not None
    await collect(store_pool, 300, at=max(ends) + timedelta(seconds=300 + 2 * bucket_seconds(300)))
    assert await store_pool.fetchval("SELECT count(*) FROM decisions WHERE id = $1", decision) == 0
    with pytest.raises(InvalidInput, match=rf"snapshot '{snapshot}' expired at"):  # a record naming a dropped one
        await full_input(store_pool, {"snapshot": snapshot, "nodes": [], "request": {}})
