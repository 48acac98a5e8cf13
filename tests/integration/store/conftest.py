"""A real PostgreSQL per session and a fresh database per test (eru.testing.pytest_postgres)."""

from __future__ import annotations

from eru.testing.pytest_postgres import (
    postgres_dsn,
    postgres_empty_dsn,
    postgres_server,
    postgres_template,
    store_pool,
)

__all__ = ["postgres_dsn", "postgres_empty_dsn", "postgres_server", "postgres_template", "store_pool"]
