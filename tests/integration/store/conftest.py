"""A real PostgreSQL per session and a fresh database per test (eru.testing.pytest_postgres), and the parameter of
the contract suites: every behaviour once on the in-memory fake and once on PostgreSQL (docs/store.md)."""

from __future__ import annotations

import pytest

from eru.testing.pytest_postgres import (
    postgres_dsn,
    postgres_empty_dsn,
    postgres_server,
    postgres_template,
    store_pool,
)

__all__ = ["postgres_dsn", "postgres_empty_dsn", "postgres_server", "postgres_template", "store_pool"]


@pytest.fixture(params=["memory", "postgres"])
def database(request: pytest.FixtureRequest) -> str | None:
    """None for the in-memory store; for PostgreSQL the DSN of a fresh migrated database (the server is started
    only for this parameter)."""
    if request.param == "memory":
        return None
    dsn: str = request.getfixturevalue("postgres_dsn")
    return dsn
