"""Every deploy's request id is settled when its row is inserted, by one statement-level trigger per INSERT
(migration 0130, docs/store.md "Settled requests"), on a real PostgreSQL: a batch's deploys in one statement give one
accepted row each, expiring after the accepted window, and never before an earlier row of the same request id (a
dead letter's longer window carries over); a failed insert settles nothing."""

from __future__ import annotations

import asyncpg
import pytest

from eru.store import transaction

INSERT_DEPLOYS_SQL = """
INSERT INTO deploys (id, request_id, pod, tenant, status, request)
SELECT 'd-' || r, r, 'p1', 'default', 'planned', '{}'::jsonb FROM unnest($1::text[]) AS r
"""


async def test_a_batch_of_deploys_settles_each_request_id_once(store_pool: asyncpg.Pool) -> None:
    await store_pool.execute("INSERT INTO pods (name) VALUES ('p1')")
    window = await store_pool.fetchval("SELECT accepted_seconds FROM settle_windows")
    await store_pool.execute(
        "INSERT INTO settled_requests (request_id, kind, outcome, reason, expires_at) "
        "VALUES ('r2', 'deploy', 'dead_lettered', 'store down', now() + interval '400 days')"
    )
    async with transaction(store_pool) as conn:
        await conn.execute(INSERT_DEPLOYS_SQL, ["r1", "r2", "r3"])
        now = await conn.fetchval("SELECT now()")
    rows = await store_pool.fetch(
        "SELECT request_id, deploy_id, expires_at FROM settled_requests WHERE outcome = 'accepted' ORDER BY request_id"
    )
    assert [(row["request_id"], row["deploy_id"]) for row in rows] == [("r1", "d-r1"), ("r2", "d-r2"), ("r3", "d-r3")]
    expires = {row["request_id"]: (row["expires_at"] - now).total_seconds() for row in rows}
    assert expires["r1"] == pytest.approx(window)
    assert expires["r3"] == pytest.approx(window)
    assert expires["r2"] == pytest.approx(400 * 86400), "the dead letter's longer window carries over"
    row_level = await store_pool.fetchval("SELECT tgtype & 1 FROM pg_trigger WHERE tgname = 'deploys_settle'")
    assert row_level == 0, "one trigger call per statement"


async def test_a_failed_insert_settles_nothing(store_pool: asyncpg.Pool) -> None:
    await store_pool.execute("INSERT INTO pods (name) VALUES ('p1')")
    await store_pool.execute(INSERT_DEPLOYS_SQL, ["r1"])
    with pytest.raises(asyncpg.UniqueViolationError):
        await store_pool.execute(INSERT_DEPLOYS_SQL, ["r5", "r1"])  # r1 again: the whole statement fails
    assert await store_pool.fetchval("SELECT count(*) FROM settled_requests") == 1
    assert await store_pool.fetchval("SELECT count(*) FROM settled_requests WHERE request_id = 'r5'") == 0
