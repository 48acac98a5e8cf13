"""What each container of the compose stack runs (`python -m eru.compose <command>`, docs/deploy.md).

Every command turns the container's environment (its own password, the stack's ports, `ERU_COMPOSE_NETWORK`) into
the configuration of one process and then `exec`s it, so the process is the container's PID 1: `docker kill` and
`docker stop` reach it directly and docker's restart policy watches it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from eru.bus.access import Account, client_account, make_account, password_hash, render_server_config
from eru.compose.topology import (
    DATABASE,
    DB_USER,
    NATS_SERVERS,
    POSTGRES,
    REPLICAS,
    ROLES,
    ROUTE_USER,
    SIM_AGENTS,
    SIM_NODES_PER_AGENT,
    Network,
    agent_nodes,
    bus_url,
    nats_endpoints,
    password_variable,
    ports_from,
    postgres_dsn,
    tenants_from,
)
from eru.errors import EruError, InvalidInput
from eru.stack.auth import write_private

NATS_DATA = Path("/var/lib/eru/nats")
POSTGRES_DATA = Path("/var/lib/eru/postgres/data")
RUNTIME_DIR = Path("/tmp/eru-compose")  # the container's own tmp; everything in it is written 0600 in a 0700 dir
PROVISION_SECONDS = 180.0


def _require(env: Mapping[str, str], variable: str) -> str:
    value = env.get(variable, "")
    if not value:
        raise InvalidInput(variable, "missing from the container's environment (see docker-compose.yml)")
    return value


def network_of(env: Mapping[str, str]) -> Network:
    """The stack's networking, from `ERU_COMPOSE_NETWORK` (bridge unless the host override says host)."""
    return Network(env.get("ERU_COMPOSE_NETWORK", "bridge"))


def stack_accounts(env: Mapping[str, str]) -> list[Account]:
    """Every client user of the bus, with the permissions `eru up` gives the same roles (docs/security.md)."""
    accounts = [make_account(role, role, _require(env, password_variable(role))) for role in ROLES]
    accounts += [
        make_account("node-agent", agent, _require(env, password_variable(agent)), nodes=agent_nodes(agent))
        for agent in SIM_AGENTS
    ]
    tenants = tenants_from(env)
    if not tenants:
        raise InvalidInput("ERU_COMPOSE_TENANTS", "no tenant: the secrets file names at least `default`")
    accounts += [client_account(tenant, password) for tenant, password in sorted(tenants.items())]
    return accounts


def nats_config(server: str, env: Mapping[str, str], runtime: Path) -> Path:
    """Write the configuration of NATS server `server` (cluster member, JetStream, users as bcrypt hashes) under
    `runtime` and return its path."""
    from eru.natsconf import ClusterMember, server_config

    if server not in NATS_SERVERS:
        raise InvalidInput("server", f"must be one of {', '.join(NATS_SERVERS)}, got {server!r}")
    network = network_of(env)
    ports = ports_from(env)
    members = [
        ClusterMember(
            name=name,
            client_port=ports[name],
            cluster_port=ports[f"{name}-cluster"],
            store_dir=str(NATS_DATA / "jetstream"),
            listen_host=network.listen_host,
            advertise_host=network.host_of(name),
        )
        for name in NATS_SERVERS
    ]
    member = next(m for m in members if m.name == server)
    route_password = _require(env, password_variable(ROUTE_USER))
    users = runtime / "users.conf"
    write_private(users, render_server_config(stack_accounts(env)))
    text = server_config(
        member,
        members,
        route_password=route_password,
        route_password_hash=password_hash(route_password),
        include_file=users.name,
    )
    # the monitoring endpoint answers the health check from inside the container only
    text += f'http: "127.0.0.1:{ports[f"{server}-monitor"]}"\n'
    config = runtime / f"{server}.conf"
    write_private(config, text)
    return config


def exec_nats(server: str, env: Mapping[str, str]) -> None:
    """Become nats-server `server`."""
    from eru.embedded.nats_server import find_binary

    config = nats_config(server, env, RUNTIME_DIR)
    binary = str(find_binary())
    os.execv(binary, [binary, "-c", str(config)])


def exec_postgres(env: Mapping[str, str]) -> None:
    """Become PostgreSQL: initdb (scram-sha-256, the generated password) on the first start, then the server."""
    import subprocess

    from eru.embedded.postgres_process import find_binaries
    from eru.embedded.postgres_server import SUPERUSER, TUNED_SETTINGS

    binaries = find_binaries()
    password = _require(env, password_variable(POSTGRES))
    network = network_of(env)
    port = ports_from(env)[POSTGRES]
    if not (POSTGRES_DATA / "PG_VERSION").exists():
        pwfile = RUNTIME_DIR / "pwfile"
        write_private(pwfile, password + "\n")
        try:
            command = [str(binaries / "initdb"), "-D", str(POSTGRES_DATA), "-U", SUPERUSER, "--encoding=UTF8"]
            command += ["--locale=C", "--no-instructions", "--auth=scram-sha-256", f"--pwfile={pwfile}"]
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        finally:
            pwfile.unlink(missing_ok=True)
    hba = POSTGRES_DATA / "pg_hba.conf"
    rule = "host all all all scram-sha-256"
    if network.mode == "bridge" and rule not in hba.read_text():
        with hba.open("a") as handle:  # other containers connect from the bridge network, with the password
            handle.write(rule + "\n")
    settings = {
        "listen_addresses": network.listen_host,
        "port": str(port),
        "unix_socket_directories": str(RUNTIME_DIR),
        "max_connections": "200",
        **TUNED_SETTINGS,
    }
    command = [str(binaries / "postgres"), "-D", str(POSTGRES_DATA)]
    for name, value in settings.items():
        command += ["-c", f"{name}={value}"]
    os.execv(command[0], command)


async def _provision_once(env: Mapping[str, str]) -> None:
    import asyncpg

    from eru.stack.provision import provision_all

    network = network_of(env)
    ports = ports_from(env)
    password = _require(env, password_variable(POSTGRES))
    admin = bus_url("admin", _require(env, password_variable("admin")), nats_endpoints(network, ports))
    dsn = postgres_dsn(network, ports, password)
    conn = await asyncpg.connect(dsn.rsplit("/", 1)[0] + "/postgres", timeout=5)
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", DATABASE):
            await conn.execute(f'CREATE DATABASE "{DATABASE}" OWNER "{DB_USER}"')
    finally:
        await conn.close()
    await provision_all(admin, dsn)


def provision(env: Mapping[str, str], within: float = PROVISION_SECONDS) -> None:
    """Create the database, apply migrations and provision the streams (R3 through `ERU_BUS__STREAM_REPLICAS`),
    retrying while the cluster elects its JetStream leader or PostgreSQL starts; exit 1 after `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        try:
            asyncio.run(_provision_once(env))
            print("provisioned: database, migrations and streams", flush=True)
            return
        except Exception as error:  # anything is retried until the deadline, then reported
            if time.monotonic() > deadline:
                print(f"provision failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
                raise SystemExit(1) from None
            time.sleep(1.0)


def service_environment(process: str, env: Mapping[str, str]) -> dict[str, str]:
    """The settings of service replica or sim agent `process` (`allocator-2`, `sim-a`): its own bus user and every
    NATS server, its health port, the DSN for the allocator."""
    network = network_of(env)
    ports = ports_from(env)
    if process in SIM_AGENTS:
        user, service = process, "node-agent"
        extra = {
            "ERU_NODE_AGENT__RUNTIME": "sim",
            "ERU_NODE_AGENT__NODE": process,
            "ERU_NODE_AGENT__SIM_NODES": str(SIM_NODES_PER_AGENT),
        }
    else:
        service, _, index = process.rpartition("-")
        if service not in REPLICAS or not index.isdigit() or not 1 <= int(index) <= REPLICAS[service]:
            raise InvalidInput("process", f"not a process of the compose stack: {process!r}")
        user, extra = service, {}
        if service == "allocator":
            extra["ERU_STORE__DSN"] = postgres_dsn(network, ports, _require(env, password_variable(POSTGRES)))
    password = _require(env, "ERU_COMPOSE_PASSWORD")
    return {
        **extra,
        "ERU_SERVICE": service,
        "ERU_BUS__URL": bus_url(user, password, nats_endpoints(network, ports)),
        "ERU_BUS__INBOX_PREFIX": f"_INBOX_{user}",
        "ERU_REPLICA": process,
        "ERU_HEALTH_PORT": str(ports[process]),
    }


def exec_service(process: str, env: Mapping[str, str]) -> None:
    """Become service replica (or sim agent) `process`."""
    settings = service_environment(process, env)
    binary = "eru-" + settings.pop("ERU_SERVICE")
    os.execvpe(binary, [binary], {**env, **settings})


def main(argv: list[str] | None = None) -> int:
    """`python -m eru.compose nats NAME | postgres | provision | run PROCESS`: a container's process."""
    args = sys.argv[1:] if argv is None else argv
    env = dict(os.environ)
    try:
        RUNTIME_DIR.mkdir(mode=0o700, exist_ok=True)
        match args:
            case ["nats", server]:
                exec_nats(server, env)
            case ["postgres"]:
                exec_postgres(env)
            case ["provision"]:
                provision(env)
            case ["run", process]:
                exec_service(process, env)
            case _:
                print("usage: python -m eru.compose nats NAME | postgres | provision | run PROCESS", file=sys.stderr)
                return 2
    except EruError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 2
    return 0
