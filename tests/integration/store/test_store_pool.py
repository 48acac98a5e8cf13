"""Pool creation: a clear, one-line, password-free StoreUnavailable when PostgreSQL is not there."""

from __future__ import annotations

import time

import pytest

from eru.errors import InvalidInput
from eru.store.pool import StoreUnavailable, check_database, create_pool, redact_dsn
from eru.testing.postgres_server import EmbeddedPostgres, free_port


async def test_unreachable_dsn_fails_fast_with_one_line() -> None:
    dsn = f"postgresql://eru:s3cret@127.0.0.1:{free_port()}/eru"
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as failure:
        await create_pool(dsn, connect_timeout=3)
    elapsed = time.monotonic() - started
    message = failure.value.message
    assert elapsed < 3
    assert "\n" not in message
    assert "s3cret" not in message
    assert message.startswith(f"PostgreSQL unavailable at {dsn.replace('s3cret', '***')}")
    assert failure.value.to_dict()["code"] == "store_unavailable"


async def test_missing_database_is_unavailable(postgres_server: EmbeddedPostgres) -> None:
    with pytest.raises(StoreUnavailable, match="no_such_db") as failure:
        await create_pool(postgres_server.dsn_for("no_such_db"))
    assert "\n" not in failure.value.message


async def test_check_database_reports_the_server_version(postgres_server: EmbeddedPostgres) -> None:
    version = await check_database(postgres_server.dsn, timeout=5)
    assert int(version.split(".")[0]) >= 14


async def test_pool_runs_queries(store_pool: object) -> None:
    import asyncpg

    assert isinstance(store_pool, asyncpg.Pool)
    assert await store_pool.fetchval("SELECT count(*) FROM schema_migrations") >= 1


async def test_non_postgres_dsn_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="dsn"):
        await create_pool("mysql://root@localhost/eru")


def test_redact_dsn() -> None:
    assert redact_dsn("postgresql://u:pw@h:5432/db?sslmode=disable") == "postgresql://u:***@h:5432/db?sslmode=disable"
    assert redact_dsn("postgresql://u@h/db") == "postgresql://u@h/db"
