"""The shape of the compose stack, pure: which containers exist, which NATS user each one is, which ports they use
and how one container reaches another (docs/deploy.md "The compose stack").

`docker-compose.yml` lists the same containers (a unit test holds the two together). Every port is a variable of the
secrets file (`ERU_COMPOSE_PORT_<NAME>`), so that with host networking (machines without a bridge) two stacks, or a
stack and a test, never collide; with bridge networking the same numbers are used inside each container's own
network namespace.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

from eru.errors import InvalidInput

NATS_SERVERS = ("nats-1", "nats-2", "nats-3")
POSTGRES = "postgres"
DATABASE = "eru"
DB_USER = "postgres"
# two replicas of each service: work is partitioned between them (docs/deploy.md "Replicas")
REPLICAS: Mapping[str, int] = {"allocator": 2, "distributor": 2, "eviction": 2}
# sim node-agent containers, each one process serving SIM_NODES_PER_AGENT simulated nodes named `<agent>-001` …
SIM_AGENTS = ("sim-a", "sim-b", "sim-c")
SIM_NODES_PER_AGENT = 4
# the roles whose passwords the secrets file holds besides the agents' and the tenants'
ROLES = ("admin", "operator", "allocator", "distributor", "eviction")
ROUTE_USER = "eru-route"
DEFAULT_TENANT = "default"
NETWORKS = ("bridge", "host")


def replica_names() -> list[str]:
    """Every service replica's container name: `allocator-1`, `allocator-2`, … ."""
    return [f"{service}-{index}" for service, count in REPLICAS.items() for index in range(1, count + 1)]


def agent_nodes(agent: str) -> list[str]:
    """The simulated nodes one agent container serves (the names `eru up` gives: docs/deploy.md)."""
    width = 3
    return [f"{agent}-{index:0{width}d}" for index in range(1, SIM_NODES_PER_AGENT + 1)]


def port_names() -> list[str]:
    """Every port the stack uses, by name: each NATS server's client, cluster and monitoring port, PostgreSQL's,
    and each replica's and agent's health/metrics port."""
    names = []
    for server in NATS_SERVERS:
        names += [f"{server}", f"{server}-cluster", f"{server}-monitor"]
    return [*names, POSTGRES, *replica_names(), *SIM_AGENTS]


def port_variable(name: str) -> str:
    """The secrets-file variable holding port `name`: `nats-1-cluster` → `ERU_COMPOSE_PORT_NATS_1_CLUSTER`."""
    return "ERU_COMPOSE_PORT_" + name.upper().replace("-", "_")


def password_variable(user: str) -> str:
    """The secrets-file variable holding the password of `user` (`sim-a` → `ERU_COMPOSE_PW_SIM_A`)."""
    return "ERU_COMPOSE_PW_" + user.upper().replace("-", "_")


def default_ports(base: int) -> dict[str, int]:
    """Consecutive ports from `base`, one per name of `port_names()`."""
    names = port_names()
    if not 1024 <= base <= 65535 - len(names):
        raise InvalidInput("port_base", f"must leave room for {len(names)} ports between 1024 and 65535, got {base}")
    return {name: base + offset for offset, name in enumerate(names)}


@dataclass(frozen=True)
class Network:
    """How containers reach each other: by service name on a bridge network, by loopback with host networking
    (every server then listens on and advertises 127.0.0.1 only: docs/deploy.md "Loopback only")."""

    mode: str

    def __post_init__(self) -> None:
        if self.mode not in NETWORKS:
            raise InvalidInput("ERU_COMPOSE_NETWORK", f"must be one of {', '.join(NETWORKS)}, got {self.mode!r}")

    def host_of(self, service: str) -> str:
        """The address other containers dial `service` at."""
        return "127.0.0.1" if self.mode == "host" else service

    @property
    def listen_host(self) -> str:
        """The address servers listen on: loopback with host networking, every interface of the container else."""
        return "127.0.0.1" if self.mode == "host" else "0.0.0.0"  # a bridge container's own interfaces only


def bus_url(user: str, password: str, hosts_ports: list[tuple[str, int]]) -> str:
    """A `bus.url` naming every NATS server (comma-separated), each with the user's credentials."""
    userinfo = f"{quote(user, safe='')}:{quote(password, safe='')}"
    return ",".join(f"nats://{userinfo}@{host}:{port}" for host, port in hosts_ports)


def nats_endpoints(network: Network, ports: Mapping[str, int]) -> list[tuple[str, int]]:
    """(host, client port) of every NATS server, as seen from inside the stack."""
    return [(network.host_of(server), ports[server]) for server in NATS_SERVERS]


def postgres_dsn(network: Network, ports: Mapping[str, int], password: str) -> str:
    """The DSN of the stack's database for the allocator (and for provisioning)."""
    host = network.host_of(POSTGRES)
    return f"postgresql://{DB_USER}:{quote(password, safe='')}@{host}:{ports[POSTGRES]}/{DATABASE}"


def parse_env_file(text: str) -> dict[str, str]:
    """KEY=VALUE lines (blank lines and `#` comments skipped), the format docker-compose's `--env-file` reads."""
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise InvalidInput(f"line {number}", "expected KEY=VALUE")
        values[key.strip()] = value.strip()
    return values


def render_env_file(values: Mapping[str, str], header: str) -> str:
    """The inverse of `parse_env_file`, with a comment header."""
    lines = [f"# {line}" for line in header.splitlines()]
    lines += [f"{key}={value}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


def ports_from(values: Mapping[str, str]) -> dict[str, int]:
    """The ports of a secrets file, by name; a missing or non-numeric one is an error naming its variable."""
    ports = {}
    for name in port_names():
        variable = port_variable(name)
        raw = values.get(variable)
        if raw is None or not raw.isdigit() or not 0 < int(raw) < 65536:
            raise InvalidInput(variable, f"expected a port number, got {raw!r}")
        ports[name] = int(raw)
    return ports


def tenants_from(values: Mapping[str, str]) -> dict[str, str]:
    """Tenant → client password from `ERU_COMPOSE_TENANTS` (`tenant:password,…`)."""
    tenants = {}
    for item in filter(None, values.get("ERU_COMPOSE_TENANTS", "").split(",")):
        tenant, sep, password = item.partition(":")
        if not sep or not tenant or not password:
            raise InvalidInput("ERU_COMPOSE_TENANTS", f"expected tenant:password entries, got {item.split(':')[0]!r}")
        tenants[tenant] = password
    return tenants
