"""Real nats-server per test and a real PostgreSQL per session (fresh database per test)."""

from __future__ import annotations

from eru.testing.pytest_nats import js, nats_server, nats_url, nc
from eru.testing.pytest_postgres import postgres_dsn, postgres_server, postgres_template, store_pool

__all__ = ["js", "nats_server", "nats_url", "nc", "postgres_dsn", "postgres_server", "postgres_template", "store_pool"]
