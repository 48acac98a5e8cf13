"""PostgreSQL stopped is an outage over any transport (docs/reliability.md "Transient failures"): over its Unix socket
the pool's reconnect fails with ENOENT (the socket file is gone with the server), over TCP with ECONNREFUSED; both are
retried up to the deadline, and a server that stays down past it is a store outage (`store_unavailable`), not a bug.

Before the pool classified connect failures at its seam, the socket's FileNotFoundError was no transient failure:
the allocator answered `handler_error` at once and dead-lettered every deploy of a 2-second outage."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from eru.retry import is_store_outage, is_transient, retry_transient
from eru.store.pool import create_pool
from eru.testing.postgres_server import EmbeddedPostgres, free_port


@pytest.fixture
def own_postgres() -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL of this test alone (stopped and started again), on a fixed port so both DSNs stay valid."""
    base = Path(tempfile.mkdtemp(prefix="eru-unreachable-pg-"))
    server = EmbeddedPostgres(base / "pg", port=free_port(), durable=False)
    server.start()
    server.create_database("eru")
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def dsn_over(server: EmbeddedPostgres, transport: str) -> str:
    """The test database's DSN over `transport` (`socket`, as `eru up` gives its services, or `tcp`)."""
    return server.socket_dsn_for("eru") if transport == "socket" else server.dsn_for("eru")


@pytest.mark.parametrize("transport", ["socket", "tcp"])
async def test_an_operation_during_an_outage_succeeds_once_postgres_is_back(
    own_postgres: EmbeddedPostgres, transport: str
) -> None:
    pool = await create_pool(dsn_over(own_postgres, transport), min_size=1, max_size=2)
    try:
        assert await pool.fetchval("SELECT 1") == 1
        await asyncio.to_thread(own_postgres.stop)
        failures: list[BaseException] = []
        restart: asyncio.Task[None] | None = None

        async def on_retry(error: BaseException, wait: float, attempt: int) -> None:
            nonlocal restart
            failures.append(error)
            if len(failures) == 3:  # down for three attempts, then back within the budget
                restart = asyncio.create_task(asyncio.to_thread(own_postgres.start))

        async def operation() -> int:
            async with pool.acquire() as conn:
                value: int = await conn.fetchval("SELECT 41 + 1")
                return value

        assert await retry_transient(operation, deadline_seconds=60, max_wait_seconds=0.5, on_retry=on_retry) == 42
        assert restart is not None
        await restart
        assert len(failures) >= 3
        assert all(is_store_outage(error) for error in failures), [repr(error) for error in failures]
    finally:
        await pool.close()


@pytest.mark.parametrize("transport", ["socket", "tcp"])
async def test_postgres_down_past_the_deadline_is_a_store_outage(
    own_postgres: EmbeddedPostgres, transport: str
) -> None:
    pool = await create_pool(dsn_over(own_postgres, transport), min_size=1, max_size=2)
    try:
        await asyncio.to_thread(own_postgres.stop)
        attempts = 0

        async def operation() -> int:
            nonlocal attempts
            attempts += 1
            async with pool.acquire() as conn:
                value: int = await conn.fetchval("SELECT 1")
                return value

        last: BaseException | None = None
        try:
            await retry_transient(operation, deadline_seconds=1.0, max_wait_seconds=0.1)
        except Exception as error:  # whatever asyncpg raised last: what matters is how it is judged
            last = error
        assert last is not None, "PostgreSQL is stopped: the operation cannot succeed"
        assert attempts > 1, f"given up at once: {last!r}"
        assert is_transient(last), repr(last)
        assert is_store_outage(last), repr(last)  # answered `store_unavailable` by consumers and responders
    finally:
        await pool.close()
        await asyncio.to_thread(own_postgres.start)
