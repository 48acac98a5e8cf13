"""A real nats-server per test (eru.testing.pytest_nats), and a real Docker engine for the docker-marked test."""

from __future__ import annotations

from eru.testing.pytest_docker import busybox_image, docker_engine, docker_node
from eru.testing.pytest_nats import js, nats_server, nats_url, nc

__all__ = ["busybox_image", "docker_engine", "docker_node", "js", "nats_server", "nats_url", "nc"]
