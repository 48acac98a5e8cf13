"""A real nats-server per test (eru.testing.pytest_nats), and helpers to run eviction replicas against it."""

from __future__ import annotations

from eru.testing.pytest_nats import js, nats_server, nats_url, nc

__all__ = ["js", "nats_server", "nats_url", "nc"]
