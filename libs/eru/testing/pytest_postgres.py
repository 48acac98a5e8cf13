"""pytest fixtures around a real PostgreSQL (`eru.testing.postgres_server.EmbeddedPostgres`).

Use them from a conftest: `from eru.testing.pytest_postgres import postgres_dsn, postgres_server, store_pool  # noqa`,
or register the module with `pytest_plugins = ["eru.testing.pytest_postgres"]` in the root conftest.

One server per test session (durability off, for speed); every test gets its own fresh database, so nothing leaks
between tests. `postgres_dsn` databases are copies of a template migrated once per session, which is much faster than
running the migrations for every test.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio

from eru.embedded.postgres_server import EmbeddedPostgres
from eru.store.migrate import apply_migrations
from eru.store.pool import create_pool

TEMPLATE_DATABASE = "eru_template"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[EmbeddedPostgres]:
    """A running PostgreSQL for the whole session, its data in a temporary directory removed afterwards.

    Not under pytest's own temp root: that root is private (0700) and pytest resets its mode whenever another
    session starts, which would lock the server's account (not root) out of its own data directory mid-run.
    """
    base = Path(tempfile.mkdtemp(prefix="eru-test-pg-"))
    server = EmbeddedPostgres(base / "postgres", durable=False)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


async def _migrate(dsn: str) -> None:
    pool = await create_pool(dsn, min_size=1, max_size=1)
    try:
        await apply_migrations(pool)
    finally:
        await pool.close()


@pytest.fixture(scope="session")
def postgres_template(postgres_server: EmbeddedPostgres) -> str:
    """Name of a database with every migration applied, copied by `postgres_dsn`."""
    postgres_server.drop_database(TEMPLATE_DATABASE)
    postgres_server.create_database(TEMPLATE_DATABASE)
    asyncio.run(_migrate(postgres_server.dsn_for(TEMPLATE_DATABASE)))
    return TEMPLATE_DATABASE


def _fresh_database(server: EmbeddedPostgres, template: str | None) -> Iterator[str]:
    name = f"test_{uuid.uuid4().hex[:16]}"
    server.create_database(name, template=template)
    try:
        yield server.dsn_for(name)
    finally:
        server.drop_database(name)


@pytest.fixture
def postgres_empty_dsn(postgres_server: EmbeddedPostgres) -> Iterator[str]:
    """DSN of a fresh, empty database (no migrations), dropped after the test."""
    yield from _fresh_database(postgres_server, None)


@pytest.fixture
def postgres_dsn(postgres_server: EmbeddedPostgres, postgres_template: str) -> Iterator[str]:
    """DSN of a fresh database with every migration applied, dropped after the test."""
    yield from _fresh_database(postgres_server, postgres_template)


@pytest_asyncio.fixture
async def store_pool(postgres_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    """An asyncpg pool on the test's migrated database, closed after the test."""
    pool = await create_pool(postgres_dsn, min_size=1, max_size=10)
    try:
        yield pool
    finally:
        await pool.close()
