"""End-to-end tests run the installed commands and services as processes against real servers."""

from eru.testing.pytest_nats import js, nats_server, nats_url, nc  # noqa: F401  (fixtures)
