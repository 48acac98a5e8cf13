"""`eru up --nats-cluster N`: N clustered nats-servers with JetStream on loopback ports (docs/deploy.md, "The NATS
cluster").

Server `nats-<i>` listens for clients on `<first port> + i - 1` and for routes on a free loopback port, keeps its
JetStream store in `<state_dir>/nats/nats-<i>` and its configuration (eru.natsconf) in `<state_dir>/auth/
nats-<i>.conf` (0600: it holds the route password), which includes the users' `auth/nats.conf` that the single
server uses too. Every server is a supervised child of `eru up`, restarted on its port, configuration and store.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from nats.js import JetStreamContext

from eru.bus.access import new_password, password_hash
from eru.embedded.nats_server import NatsServer, free_port, server_info
from eru.natsconf import ClusterMember, client_urls, cluster_configs, cluster_members
from eru.stack.auth import write_private
from eru.stack.info import StackError, ensure_port_free

# JetStream keeps each stream on this many servers (R3): any one may die without losing a message or stopping
CLUSTER_REPLICAS = 3
MAX_CLUSTER = 5


def check_cluster_size(size: int) -> None:
    """`StackError` for a cluster size eru does not run: 1 (a single server) or 3 to 5."""
    if size == 1 or 3 <= size <= MAX_CLUSTER:
        return
    if size == 2:
        raise StackError(
            "--nats-cluster 2: two servers cannot lose one (JetStream needs a majority of them); use 3 or 5"
        )
    raise StackError(f"--nats-cluster {size}: use 1 (a single server) or 3 to {MAX_CLUSTER}")


def stream_replicas(size: int) -> int:
    """Copies of each stream on a cluster of `size` servers."""
    return min(CLUSTER_REPLICAS, size)


class EmbeddedNatsCluster:
    """The servers of one cluster under `state_dir` (not started until `start()`)."""

    def __init__(self, state_dir: Path, size: int, first_port: int, *, auth_include: Path | None) -> None:
        check_cluster_size(size)
        client_ports = [first_port + index for index in range(size)]
        for index, port in enumerate(client_ports):
            ensure_port_free(port, f"nats-server nats-{index + 1} (--nats-port {first_port} + {index})")
        cluster_ports: list[int] = []
        while len(cluster_ports) < size:
            port = free_port()
            if port not in client_ports and port not in cluster_ports:
                cluster_ports.append(port)
        self.members: list[ClusterMember] = cluster_members(
            size, client_ports=client_ports, cluster_ports=cluster_ports, store_root=str(state_dir / "nats")
        )
        route_password = new_password()
        texts = cluster_configs(
            self.members,
            route_password=route_password,
            route_password_hash=password_hash(route_password),
            include_file=auth_include.name if auth_include is not None else None,
        )
        config_dir = auth_include.parent if auth_include is not None else state_dir / "auth"
        self.servers: dict[str, NatsServer] = {}
        for member in self.members:
            config = config_dir / f"{member.name}.conf"
            write_private(config, texts[member.name])
            self.servers[member.name] = NatsServer(
                store_dir=Path(member.store_dir),
                port=member.client_port,
                config_file=config,
                complete_config=True,
                log_file=Path(member.store_dir) / "nats-server.log",
            )

    @property
    def url(self) -> str:
        """Every server's client URL, comma-separated (what services and the CLI connect with)."""
        return client_urls(self.members)

    @property
    def ports(self) -> dict[str, int]:
        """`nats-<i>` → its client port, `nats-<i>-cluster` → its route port (what `eru down` waits to be free)."""
        ports = {m.name: m.client_port for m in self.members}
        return ports | {f"{m.name}-cluster": m.cluster_port for m in self.members}

    def start(self, timeout: float = 30.0) -> None:
        """Start every server, then wait until they see one another (each lists all in its `connect_urls`)."""
        for server in self.servers.values():
            server.start()
        expected = {f"127.0.0.1:{m.client_port}" for m in self.members}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            infos = [server_info("127.0.0.1", m.client_port, timeout=1.0) for m in self.members]
            if all(info is not None and set(_strings(info.get("connect_urls"))) >= expected for info in infos):
                return
            time.sleep(0.1)
        raise StackError(f"the {len(self.members)} nats-servers did not form a cluster within {timeout:.0f} s")

    def stop(self) -> None:
        """Stop every server."""
        for server in self.servers.values():
            server.stop()


class EmbeddedNats:
    """The stack's own nats-servers: one (`nats-server`, storing in `<state_dir>/nats`) or a cluster (`nats-1` …)."""

    def __init__(self, state_dir: Path, size: int, port: int, *, config_file: Path | None) -> None:
        check_cluster_size(size)
        self.cluster: EmbeddedNatsCluster | None = None
        if size == 1:
            ensure_port_free(port, "nats-server")
            single = NatsServer(store_dir=state_dir / "nats", port=port, config_file=config_file)
            self.servers: dict[str, NatsServer] = {"nats-server": single}
            self.ports = {"nats": port}
        else:
            self.cluster = EmbeddedNatsCluster(state_dir, size, port, auth_include=config_file)
            self.servers = self.cluster.servers
            self.ports = self.cluster.ports
        self.replicas = stream_replicas(size)

    @property
    def url(self) -> str:
        """The client URL of the server, or of every server comma-separated."""
        if self.cluster is not None:
            return self.cluster.url
        return self.servers["nats-server"].url

    def start(self) -> None:
        """Start the server(s); a cluster's once they see one another."""
        if self.cluster is not None:
            self.cluster.start()
        else:
            self.servers["nats-server"].start()

    def stop(self) -> None:
        """Stop every server."""
        for server in self.servers.values():
            server.stop()


def _strings(value: Any) -> list[str]:
    return [str(item) for item in value] if isinstance(value, list) else []


def server_states(url: str) -> list[dict[str, Any]]:
    """Per server of a (comma-separated) bus URL: its address, name and whether it greets a client now (the INFO
    line only: no credentials needed); for `eru status`."""
    from urllib.parse import urlsplit

    from eru.bus.connection import split_urls

    states = []
    for server in split_urls(url):
        parts = urlsplit(server)
        host, port = parts.hostname or "127.0.0.1", parts.port or 4222
        info = server_info(host, port, timeout=1.0)
        states.append(
            {
                "address": f"{host}:{port}",
                "name": str(info.get("server_name", "")) if info else "",
                "state": "up" if info is not None else "down",
            }
        )
    return states


async def stream_placement(js: JetStreamContext) -> list[dict[str, Any]]:
    """Per stream: its copies, the server that leads it and the state of each follower (for `eru status`)."""
    from eru.bus.streams import default_streams

    rows: list[dict[str, Any]] = []
    for spec in default_streams():
        try:
            info = await js.stream_info(spec.name)
        except Exception as error:  # a stream missing or unreachable right now is shown as such
            rows.append({"stream": spec.name, "error": type(error).__name__})
            continue
        cluster = info.cluster
        followers = [
            {"name": peer.name, "current": bool(peer.current), "offline": bool(peer.offline), "lag": peer.lag}
            for peer in (cluster.replicas or [] if cluster is not None else [])
        ]
        rows.append(
            {
                "stream": spec.name,
                "replicas": int(info.config.num_replicas or 1),
                "leader": cluster.leader if cluster is not None else None,
                "followers": followers,
            }
        )
    return rows


def describe_placement(rows: list[dict[str, Any]]) -> str:
    """One line per stream: `ERU_DEPLOY R3 leader nats-2, followers nats-1 (current), nats-3 (offline)`."""
    lines = []
    for row in rows:
        if "error" in row:
            lines.append(f"{row['stream']}: {row['error']}")
            continue
        followers = ", ".join(
            f"{f['name']} ({'offline' if f['offline'] else 'current' if f['current'] else 'catching up'})"
            for f in row["followers"]
        )
        lines.append(
            f"{row['stream']} R{row['replicas']} leader {row['leader'] or '-'}"
            + (f", followers {followers}" if followers else "")
        )
    return "\n".join(lines)
