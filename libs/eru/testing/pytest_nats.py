"""pytest fixtures around a real nats-server (`eru.testing.nats_server.NatsServer`).

Use them from a conftest: `from eru.testing.pytest_nats import nats_server, nats_url, nc, js  # noqa: F401`, or
register the module with `pytest_plugins = ["eru.testing.pytest_nats"]` in the root conftest.

`nats_server` is one fresh server per test (it starts in well under a second), so streams and consumers never leak
from one test into the next.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from nats.aio.client import Client

from eru.bus.connection import connect
from eru.embedded.nats_server import NatsServer


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A running nats-server with JetStream on a free loopback port, store under the test's tmp_path."""
    server = NatsServer(store_dir=tmp_path / "nats")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def nats_url(nats_server: NatsServer) -> str:
    """The URL of the test's nats-server."""
    return nats_server.url


@pytest_asyncio.fixture
async def nc(nats_url: str) -> AsyncIterator[Any]:
    """A client connected to the test's nats-server, closed after the test."""
    client = await connect(nats_url, name="eru-test", connect_timeout=5)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def js(nc: Client) -> Any:
    """The JetStream context of `nc`."""
    return nc.jetstream()
