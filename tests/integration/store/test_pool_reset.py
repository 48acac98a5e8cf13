"""A connection released to eru's pool costs no round trip (docs/store.md "Connecting"), and comes back with no
session state of the block that used it: transaction-scoped locks and settings gone, a stopped listener no longer
listening."""

from __future__ import annotations

from typing import Any

from eru.store import transaction
from eru.store.pool import create_pool
from eru.store.transaction import advisory_xact_lock


async def test_release_runs_no_statement_and_leaves_no_session_state(postgres_dsn: str) -> None:
    pool = await create_pool(postgres_dsn, min_size=1, max_size=1)
    try:
        statements: list[str] = []
        async with pool.acquire() as conn:
            conn.add_query_logger(lambda query: statements.append(query.query))
            pid = await conn.fetchval("SELECT pg_backend_pid()")
        async with transaction(pool) as conn:
            await advisory_xact_lock(conn, "eru.pod:p1")
            await conn.execute("SET LOCAL lock_timeout = '123ms'")
        # asyncpg's default reset would add `SELECT pg_advisory_unlock_all(); CLOSE ALL; …` after each release
        assert statements == [
            "SELECT pg_backend_pid()",
            "BEGIN ISOLATION LEVEL READ COMMITTED;",
            "SELECT pg_advisory_xact_lock($1)",
            "SET LOCAL lock_timeout = '123ms'",
            "COMMIT;",
        ]
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT pg_backend_pid()") == pid  # the same session, reused
            assert await conn.fetchval("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'") == 0
            assert await conn.fetchval("SHOW lock_timeout") == "0"

            def heard(*_args: Any) -> None:
                pass

            await conn.add_listener("eru_test_channel", heard)
            assert await conn.fetchval("SELECT count(*) FROM pg_listening_channels()") == 1
            await conn.remove_listener("eru_test_channel", heard)
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT pg_backend_pid()") == pid
            assert await conn.fetchval("SELECT count(*) FROM pg_listening_channels()") == 0
    finally:
        await pool.close()
