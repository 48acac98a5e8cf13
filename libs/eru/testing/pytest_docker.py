"""pytest fixtures around a real Docker engine (`eru.testing.docker_image`).

`docker_engine` (session) makes sure an engine answers, starting dockerd through scripts/start-dockerd.sh when it
can; when no engine can be had, every test using it is SKIPPED with a loud reason (also printed to stderr), never
passed silently. `busybox_image` is the locally built test image. `docker_node` is a fresh node name per test whose
containers are removed afterwards.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Iterator

import pytest

from eru.testing.docker_image import engine_problem, ensure_test_image, remove_containers, start_engine


@pytest.fixture(scope="session")
def docker_engine() -> str | None:
    """The engine URL to use (None = the default socket); skips loudly when no engine can be started."""
    problem = asyncio.run(engine_problem())
    if problem is not None:
        output = start_engine()
        problem = asyncio.run(engine_problem())
        if problem is not None:
            said = (output.splitlines() or ["-"])[0]
            reason = f"NO DOCKER ENGINE, docker tests SKIPPED: {problem}; start-dockerd.sh said: {said}"
            print(f"\n*** {reason} ***", file=sys.stderr)
            pytest.skip(reason)
    return None


@pytest.fixture(scope="session")
def busybox_image(docker_engine: str | None) -> str:
    """The tag of the busybox test image (imported once per session when missing)."""
    try:
        return asyncio.run(ensure_test_image(url=docker_engine))
    except RuntimeError as error:
        reason = f"NO TEST IMAGE, docker tests SKIPPED: {error}"
        print(f"\n*** {reason} ***", file=sys.stderr)
        pytest.skip(reason)


@pytest.fixture
def docker_node(docker_engine: str | None) -> Iterator[str]:
    """A node name unique to the test; its containers are force-removed after the test."""
    node = f"t{uuid.uuid4().hex[:10]}"
    try:
        yield node
    finally:
        asyncio.run(remove_containers("eru.node", node, url=docker_engine))
