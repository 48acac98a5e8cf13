"""Every nats-server eru starts listens on and advertises loopback only (docs/deploy.md "The NATS cluster"): a raw TCP
client reads the INFO line each one greets it with, and no address in it is another interface's — the single server
as much as each server of a cluster, whose `connect_urls` tell clients where to reconnect."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from eru.bus.connection import connect
from eru.stack.cluster import EmbeddedNatsCluster, stream_placement
from eru.testing.nats_server import NatsServer, free_port, non_loopback_addresses, server_info

pytestmark = pytest.mark.timeout(60)


def info_of(port: int) -> dict[str, Any]:
    info = server_info("127.0.0.1", port, timeout=2.0)
    assert info is not None, f"no INFO from 127.0.0.1:{port}"
    return dict(info)


def test_the_check_catches_an_address_of_another_interface() -> None:
    """What nats-server sends by default in a cluster: its peers' addresses on every interface."""
    info = {"host": "0.0.0.0", "connect_urls": ["10.0.3.7:4222", "127.0.0.1:4223"], "client_ip": "127.0.0.1"}
    assert non_loopback_addresses(info) == ["host=0.0.0.0", "connect_urls=10.0.3.7"]
    assert non_loopback_addresses({"client_connect_url": "nats://eru-host.example:4222"}) == [
        "client_connect_url=eru-host.example"
    ]
    assert non_loopback_addresses({"host": "127.0.0.1", "connect_urls": ["[::1]:4222", "localhost:4"]}) == []


def test_a_single_server_advertises_loopback_only(tmp_path: Path) -> None:
    with NatsServer(store_dir=tmp_path / "nats") as server:
        info = info_of(server.port)
        assert info["host"] == "127.0.0.1"
        assert non_loopback_addresses(info) == []


def test_each_server_of_a_cluster_advertises_the_three_loopback_addresses_only(tmp_path: Path) -> None:
    first = free_port()
    try:
        cluster = EmbeddedNatsCluster(tmp_path, 3, first, auth_include=None)
    except Exception as error:  # the two ports after a free one may be taken by someone else: try another run
        pytest.skip(f"ports {first}..{first + 2} not free: {error}")
    try:
        cluster.start()
        expected = {f"127.0.0.1:{first + offset}" for offset in range(3)}
        for offset in range(3):
            info = info_of(first + offset)
            assert non_loopback_addresses(info) == [], info
            assert set(info["connect_urls"]) == expected, info  # type: ignore[arg-type]
            assert info["cluster"] == "eru"
            assert info["server_name"] == f"nats-{offset + 1}"
        # every stream on all three (R3): a client connected with the three URLs provisions them
        placement = asyncio.run(_provision_and_place(cluster.url))
        assert {row["stream"]: row["replicas"] for row in placement} == {
            "ERU_DEPLOY": 3,
            "ERU_NODE": 3,
            "ERU_EVENTS": 3,
            "ERU_METRICS": 3,
            "ERU_DLQ": 3,
            "ERU_PARTITIONS": 3,
        }
        for row in placement:
            assert row["leader"] in {"nats-1", "nats-2", "nats-3"}
            assert len(row["followers"]) == 2
        # routes need the route user: a stranger on a cluster port is refused
        for member in cluster.members:
            assert "Authorization Violation" in _route_without_credentials(member.cluster_port)
    finally:
        cluster.stop()


def _route_without_credentials(port: int) -> str:
    """What a route connection without the route user's password gets back."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.settimeout(5)
        received = conn.recv(65536)
        conn.sendall(b'CONNECT {"verbose":false,"pedantic":false,"name":"stranger"}\r\nPING\r\n')
        try:
            while chunk := conn.recv(65536):
                received += chunk
        except OSError:
            pass
    return received.decode(errors="replace")


async def _provision_and_place(url: str) -> list[dict[str, Any]]:
    import dataclasses

    from eru.bus.streams import default_streams, provision_streams

    nc = await connect(url, name="advertise-test", connect_timeout=10)
    try:
        specs = tuple(dataclasses.replace(spec, replicas=3) for spec in default_streams())
        deadline = asyncio.get_running_loop().time() + 30
        while True:  # a fresh cluster elects its JetStream leader first
            try:
                await provision_streams(nc.jetstream(), specs)
                break
            except Exception:
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.5)
        return await stream_placement(nc.jetstream())
    finally:
        await nc.close()
