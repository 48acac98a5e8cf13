"""Connecting (and failing to), provisioning streams, and the nats-server fixture itself."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from eru.bus.connection import connect
from eru.bus.errors import BusUnavailable
from eru.bus.streams import (
    DEPLOY,
    DLQ,
    EVENTS,
    METRICS,
    NODE,
    PARTITIONS,
    StreamSpec,
    default_streams,
    provision_streams,
)
from eru.errors import EruError
from eru.testing.nats_server import NatsServer, free_port


async def test_unreachable_server_is_one_clear_error_quickly() -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    began = time.monotonic()
    with pytest.raises(BusUnavailable) as caught:
        await connect(url, name="eru-test", connect_timeout=1.0)
    elapsed = time.monotonic() - began
    assert elapsed < 3.0
    assert isinstance(caught.value, EruError)
    assert url in caught.value.message
    assert "\n" not in caught.value.message


async def test_server_starting_late_is_reached_within_the_connect_timeout(tmp_path: Path) -> None:
    port = free_port()
    server = NatsServer(store_dir=tmp_path / "late", port=port)

    async def start_later() -> None:
        await asyncio.sleep(0.5)
        await asyncio.to_thread(server.start)

    starter = asyncio.create_task(start_later())
    try:
        client = await connect(f"nats://127.0.0.1:{port}", name="eru-test", connect_timeout=8.0)
        assert client.is_connected
        await client.close()
    finally:
        await starter
        server.stop()


async def test_provisioning_twice_and_concurrently_is_fine(nats_url: str) -> None:
    clients = [await connect(nats_url, name=f"eru-provision-{i}") for i in range(3)]
    try:
        results = await asyncio.gather(*(provision_streams(c.jetstream()) for c in clients))
        assert all(len(infos) == 6 for infos in results)
        again = await provision_streams(clients[0].jetstream())
        js = clients[0].jetstream()
        names = sorted(str(info.config.name) for info in await js.streams_info())
        assert names == sorted([DEPLOY, NODE, EVENTS, METRICS, DLQ, PARTITIONS])
        metrics = next(info for info in again if info.config.name == METRICS)
        assert metrics.config.max_age == 3600
        assert metrics.config.duplicate_window == 120
    finally:
        for client in clients:
            await client.close()


async def test_provisioning_updates_retention_in_place(js: Any) -> None:
    await provision_streams(js, metrics_max_age_seconds=3600)
    await js.publish("eru.metrics.node-1", b"\x80")
    await provision_streams(js, events_max_age_seconds=86400, metrics_max_age_seconds=600)
    metrics = await js.stream_info(METRICS)
    events = await js.stream_info(EVENTS)
    assert metrics.config.max_age == 600
    assert events.config.max_age == 86400
    assert metrics.state.messages == 1, "updating retention keeps what the stream holds"


async def test_streams_cover_every_subject_family(js: Any) -> None:
    await provision_streams(js)
    expected = {
        "eru.deploy.request": DEPLOY,
        "eru.deploy.d-1.planned": DEPLOY,
        "eru.node.node-1.cmd.create": NODE,
        "eru.node.node-1.condition": EVENTS,
        "eru.container.node-1.started": EVENTS,
        "eru.eviction.node-1": EVENTS,
        "eru.metrics.node-1": METRICS,
        "eru.dlq.eru.deploy.request": DLQ,
    }
    for subject, stream in expected.items():
        ack = await js.publish(subject, b"\x80")
        assert ack.stream == stream, subject


def test_bad_retention_is_invalid_input() -> None:
    spec = StreamSpec("ERU_X", ("x.>",), 0, "x")
    with pytest.raises(EruError, match=r"streams\.ERU_X\.max_age_seconds"):
        spec.config()
    assert {spec.name for spec in default_streams()} == {DEPLOY, NODE, EVENTS, METRICS, DLQ, PARTITIONS}


def test_nats_server_runs_jetstream_and_cleans_its_temporary_store() -> None:
    server = NatsServer()
    server.start()
    try:
        assert server.url.startswith("nats://127.0.0.1:")
        store = server.store_dir
        assert store is not None
        assert store.is_dir()
    finally:
        server.stop()
    assert not server.running
    assert not store.exists()


async def test_consuming_a_stream_that_does_not_exist_is_one_clear_error(js: Any) -> None:
    from bus_helpers import Job

    from eru.bus.consumer import consume
    from eru.bus.errors import BusError

    async def handler(*_: Any) -> None:
        raise AssertionError("never called")

    with pytest.raises(BusError, match="stream ERU_EVENTS does not exist"):
        await consume(js, EVENTS, "worker", "eru.container.*.*", Job, handler)
