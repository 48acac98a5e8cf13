"""The clustered nats-server configurations (eru.natsconf): loopback listening and advertising, authenticated
routes to every other member, JetStream per server, and clear errors for impossible clusters."""

from __future__ import annotations

import pytest

from eru.errors import InvalidInput
from eru.natsconf import ClusterMember, client_urls, cluster_configs, cluster_members, server_config

HASH = "$2a$04$abcdefghijklmnopqrstuuGN0kX4bqo6W7c1Vb2u6yYd7TjS2nB1a"


def three() -> list[ClusterMember]:
    return cluster_members(3, client_ports=[4001, 4002, 4003], cluster_ports=[6001, 6002, 6003], store_root="/s/")


def test_every_member_listens_and_advertises_loopback_and_routes_to_the_others() -> None:
    members = three()
    texts = cluster_configs(members, route_password="p/w", route_password_hash=HASH, include_file="nats.conf")
    assert list(texts) == ["nats-1", "nats-2", "nats-3"]
    two = texts["nats-2"]
    assert 'server_name: "nats-2"' in two
    assert 'listen: "127.0.0.1:4002"' in two
    assert 'client_advertise: "127.0.0.1:4002"' in two
    assert 'jetstream: {store_dir: "/s/nats-2"}' in two
    assert 'listen: "127.0.0.1:6002"' in two
    assert 'advertise: "127.0.0.1:6002"' in two
    # routes to the two others only, the password URL-quoted; the hash (never the password) authorises routes
    assert (
        'routes: ["nats-route://eru-route:p%2Fw@127.0.0.1:6001", "nats-route://eru-route:p%2Fw@127.0.0.1:6003"]' in two
    )
    assert f'authorization: {{user: "eru-route", password: "{HASH}"}}' in two
    assert two.rstrip().endswith('include "nats.conf"')
    assert client_urls(members) == "nats://127.0.0.1:4001,nats://127.0.0.1:4002,nats://127.0.0.1:4003"


def test_compose_style_members_listen_on_one_host_and_advertise_another() -> None:
    members = cluster_members(
        2,
        client_ports=[4222, 4223],
        cluster_ports=[6222, 6223],
        store_root="/data",
        listen_host="0.0.0.0",
        advertise_host="10.1.2.3",
    )
    text = server_config(members[0], members, route_password="x", route_password_hash=HASH)
    assert 'listen: "0.0.0.0:4222"' in text
    assert 'client_advertise: "10.1.2.3:4222"' in text
    assert "nats-route://eru-route:x@10.1.2.3:6223" in text
    assert "include" not in text


def test_a_single_member_has_no_cluster_block() -> None:
    (only,) = cluster_members(1, client_ports=[4001], cluster_ports=[6001], store_root="/s")
    text = server_config(only, [only], route_password="x", route_password_hash=HASH)
    assert "cluster" not in text.split("\n", 1)[1]
    assert 'client_advertise: "127.0.0.1:4001"' in text


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"size": 0}, "nats_cluster"),
        ({"client_ports": [1, 2]}, "client_ports"),
        ({"cluster_ports": [7, 8, 9, 10]}, "cluster_ports"),
        ({"cluster_ports": [1, 8, 9]}, "ports"),
    ],
)
def test_impossible_clusters_name_the_field(kwargs: dict[str, object], field: str) -> None:
    arguments: dict[str, object] = {
        "size": 3,
        "client_ports": [1, 2, 3],
        "cluster_ports": [7, 8, 9],
        "store_root": "/s",
        **kwargs,
    }
    size = arguments.pop("size")
    with pytest.raises(InvalidInput) as raised:
        cluster_members(size, **arguments)  # type: ignore[arg-type]
    assert raised.value.field == field


def test_a_cluster_needs_its_route_credentials_and_unique_names() -> None:
    members = three()
    with pytest.raises(InvalidInput, match="bcrypt"):
        server_config(members[0], members, route_password="x", route_password_hash="plain")
    twins = [members[0], ClusterMember("nats-1", 5000, 7000, "/t")]
    with pytest.raises(InvalidInput, match="unique"):
        server_config(members[0], twins, route_password="x", route_password_hash=HASH)
    stranger = ClusterMember("nats-9", 5000, 7000, "/t")
    with pytest.raises(InvalidInput, match="not one of"):
        server_config(stranger, members, route_password="x", route_password_hash=HASH)
