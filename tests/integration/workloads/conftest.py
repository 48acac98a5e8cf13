"""Real nats-server per test, a real PostgreSQL per session (fresh database per test) and, for the docker tests, a
real Docker engine with the busybox test image (skipped loudly without one)."""

from __future__ import annotations

from eru.testing.pytest_docker import busybox_image, docker_engine, docker_node
from eru.testing.pytest_nats import js, nats_server, nats_url, nc
from eru.testing.pytest_postgres import postgres_dsn, postgres_server, postgres_template, store_pool

__all__ = [
    "busybox_image",
    "docker_engine",
    "docker_node",
    "js",
    "nats_server",
    "nats_url",
    "nc",
    "postgres_dsn",
    "postgres_server",
    "postgres_template",
    "store_pool",
]
