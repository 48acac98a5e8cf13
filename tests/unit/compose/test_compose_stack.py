"""The compose stack's shape, secrets and container configurations (docs/deploy.md "The compose stack"): the
committed compose files agree with `eru.compose.topology`, hold no secret, and every generated file is private."""

from __future__ import annotations

import re
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from eru.compose import entry, secrets
from eru.compose.topology import (
    NATS_SERVERS,
    SIM_AGENTS,
    Network,
    agent_nodes,
    default_ports,
    parse_env_file,
    password_variable,
    port_names,
    port_variable,
    ports_from,
    replica_names,
    tenants_from,
)
from eru.errors import InvalidInput

ROOT = Path(__file__).resolve().parents[3]
ALL_SERVICES = {*NATS_SERVERS, "postgres", "provision", *replica_names(), *SIM_AGENTS}


def compose_file(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / name).read_text())
    return loaded


def test_the_compose_file_runs_exactly_the_topologys_containers() -> None:
    services = compose_file("docker-compose.yml")["services"]
    assert set(services) == ALL_SERVICES
    assert replica_names() == [
        "allocator-1", "allocator-2", "distributor-1", "distributor-2", "eviction-1", "eviction-2",
    ]  # fmt: skip
    for name, service in services.items():
        # -P: never an `eru` from the working directory (docs/operations.md "The supervisor")
        assert service["command"][:4] == ["python3", "-P", "-m", "eru.compose"], name
        assert service.get("restart") == ("no" if name == "provision" else "unless-stopped"), name
        assert ("healthcheck" in service) == (name != "provision"), name
    for process in [*replica_names(), *SIM_AGENTS]:
        assert services[process]["command"][4:] == ["run", process]
        assert services[process]["depends_on"]["provision"]["condition"] == "service_completed_successfully"


def test_the_host_override_puts_every_container_on_the_host_network_and_says_so() -> None:
    services = compose_file("docker-compose.host.yml")["services"]
    assert set(services) == ALL_SERVICES
    for service in services.values():
        assert service["network_mode"] == "host"
        assert service["environment"]["ERU_COMPOSE_NETWORK"] == "host"


def test_only_the_bridge_file_publishes_ports_and_only_on_loopback() -> None:
    assert all("ports" not in s for s in compose_file("docker-compose.yml")["services"].values())
    published = compose_file("docker-compose.publish.yml")["services"]
    assert set(published) == {*NATS_SERVERS, "postgres"}
    for service in published.values():
        assert all(port.startswith("127.0.0.1:") for port in service["ports"])


def test_every_port_variable_is_the_topologys_and_no_secret_is_in_any_committed_file() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    used = set(re.findall(r"ERU_COMPOSE_PORT_[A-Z0-9_]+", text))
    assert used == {port_variable(name) for name in port_names()}
    for name in ("docker-compose.yml", "docker-compose.host.yml", "docker-compose.publish.yml"):
        body = (ROOT / name).read_text()
        # every password is an interpolation of the generated secrets file, never a value
        for line in body.splitlines():
            if "ERU_COMPOSE_PW_" in line or "PASSWORD" in line:
                assert re.search(r":\s*\$\{ERU_COMPOSE_PW_[A-Z_]+\}\s*$", line), (name, line)
        assert not re.search(r"[A-Za-z0-9_-]{43}", body), name  # the length of a generated password


def test_services_get_only_their_own_password() -> None:
    services = compose_file("docker-compose.yml")["services"]
    for process in replica_names():
        env = services[process]["environment"]
        role = process.rsplit("-", 1)[0]
        passwords = {k: v for k, v in env.items() if "PW" in k or "PASSWORD" in k}
        expected = {"ERU_COMPOSE_PASSWORD": f"${{{password_variable(role)}}}"}
        if role == "allocator":
            expected[password_variable("postgres")] = f"${{{password_variable('postgres')}}}"
        assert passwords == expected, process
        assert env["ERU_BUS__STREAM_REPLICAS"] == "3"


def test_secrets_are_private_distinct_kept_and_rotated(tmp_path: Path) -> None:
    directory = tmp_path / ".compose"
    path = secrets.generate(directory, port_base=30000)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    values = parse_env_file(path.read_text())
    passwords = [v for k, v in values.items() if k.startswith("ERU_COMPOSE_PW_")]
    assert len(passwords) == len(set(passwords)) == 5 + len(SIM_AGENTS) + 2
    assert all(len(p) >= 43 for p in passwords)
    assert ports_from(values) == default_ports(30000)
    assert set(tenants_from(values)) == {"default"}
    assert secrets.generate(directory, port_base=31000).read_text() == path.read_text()  # kept as it is
    secrets.generate(directory, rotate=True)
    rotated = parse_env_file(path.read_text())
    assert ports_from(rotated) == ports_from(values)
    assert not {v for k, v in rotated.items() if k.startswith("ERU_COMPOSE_PW_")} & set(passwords)


def test_free_ports_are_distinct(tmp_path: Path) -> None:
    values = parse_env_file(secrets.generate(tmp_path, port_base=None).read_text())
    ports = list(ports_from(values).values())
    assert len(ports) == len(set(ports)) == len(port_names())


def test_the_client_file_names_every_server_on_loopback(tmp_path: Path) -> None:
    secrets.generate(tmp_path, port_base=32000)
    path = secrets.write_client_env(tmp_path, Network("host"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    env = parse_env_file(path.read_text())
    assert set(env) == {"ERU_BUS_URL", "ERU_CLIENT_URL", "ERU_DATABASE_URL"}
    servers = env["ERU_BUS_URL"].split(",")
    assert [s.split("@")[1] for s in servers] == ["127.0.0.1:32000", "127.0.0.1:32003", "127.0.0.1:32006"]
    assert all(s.startswith("nats://operator:") for s in servers)
    assert all(s.startswith("nats://tenant-default:") for s in env["ERU_CLIENT_URL"].split(","))
    assert env["ERU_DATABASE_URL"].endswith("@127.0.0.1:32009/eru")


def container_env(tmp_path: Path, network: str) -> dict[str, str]:
    values = parse_env_file(secrets.generate(tmp_path, port_base=33000).read_text())
    return {**values, "ERU_COMPOSE_NETWORK": network}


def test_host_networking_servers_listen_and_advertise_loopback_only(tmp_path: Path) -> None:
    env = container_env(tmp_path, "host")
    config = entry.nats_config("nats-2", env, tmp_path / "run").read_text()
    addresses = re.findall(r'(?:listen|advertise|client_advertise|http): "([^"]+)"', config)
    assert len(addresses) == 5  # listen, client_advertise, cluster listen, cluster advertise, http
    assert all(a.startswith("127.0.0.1:") for a in addresses)
    routes = re.findall(r"@([0-9.]+):(\d+)", config)
    assert sorted(routes) == [("127.0.0.1", "33001"), ("127.0.0.1", "33007")]  # nats-1 and nats-3
    users = (tmp_path / "run" / "users.conf").read_text()
    for variable, value in env.items():
        if variable.startswith("ERU_COMPOSE_PW_"):
            assert value not in users  # bcrypt hashes only
    assert users.count('"$2a$') == 5 + len(SIM_AGENTS) + 1  # the roles, the agents, tenant default
    assert stat.S_IMODE((tmp_path / "run" / "users.conf").stat().st_mode) == 0o600


def test_bridge_networking_servers_advertise_their_service_names(tmp_path: Path) -> None:
    config = entry.nats_config("nats-1", container_env(tmp_path, "bridge"), tmp_path / "run").read_text()
    assert 'listen: "0.0.0.0:33000"' in config
    assert 'client_advertise: "nats-1:33000"' in config
    assert "@nats-2:33004" in config


def test_each_process_connects_as_its_own_user_to_every_server(tmp_path: Path) -> None:
    env = {**container_env(tmp_path, "host"), "ERU_COMPOSE_PASSWORD": "pw"}
    allocator = entry.service_environment("allocator-2", env)
    assert allocator["ERU_BUS__URL"].count("nats://allocator:pw@127.0.0.1:") == 3
    assert allocator["ERU_BUS__INBOX_PREFIX"] == "_INBOX_allocator"
    assert allocator["ERU_REPLICA"] == "allocator-2"
    assert allocator["ERU_STORE__DSN"].startswith("postgresql://postgres:")
    assert "ERU_STORE__DSN" not in entry.service_environment("distributor-1", env)
    agent = entry.service_environment("sim-b", env)
    assert agent["ERU_SERVICE"] == "node-agent"
    assert agent["ERU_NODE_AGENT__RUNTIME"] == "sim"
    assert agent_nodes("sim-b") == ["sim-b-001", "sim-b-002", "sim-b-003", "sim-b-004"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"ERU_COMPOSE_PASSWORD": ""}, "ERU_COMPOSE_PASSWORD"),
        ({"ERU_COMPOSE_PORT_NATS_2": "x"}, "ERU_COMPOSE_PORT_NATS_2"),
        ({"ERU_COMPOSE_NETWORK": "overlay"}, "ERU_COMPOSE_NETWORK"),
        ({"ERU_COMPOSE_TENANTS": "default"}, "ERU_COMPOSE_TENANTS"),
    ],
)
def test_a_bad_container_environment_is_an_error_naming_the_variable(
    tmp_path: Path, change: dict[str, str], field: str
) -> None:
    env = {**container_env(tmp_path, "host"), "ERU_COMPOSE_PASSWORD": "pw", **change}

    def check() -> object:
        if field == "ERU_COMPOSE_TENANTS":
            return entry.stack_accounts(env)
        return entry.service_environment("allocator-1", env)

    with pytest.raises(InvalidInput) as raised:
        check()
    assert raised.value.field == field


def test_an_unknown_process_or_a_bad_port_base_is_refused() -> None:
    with pytest.raises(InvalidInput, match="allocator-3"):
        entry.service_environment("allocator-3", {"ERU_COMPOSE_PASSWORD": "pw", **_ports()})
    with pytest.raises(InvalidInput) as raised:
        default_ports(65530)
    assert raised.value.field == "port_base"


def test_a_damaged_secrets_file_is_refused_naming_the_line(tmp_path: Path) -> None:
    (tmp_path / secrets.SECRETS_FILE).write_text("ERU_COMPOSE_PW_ADMIN\n")
    with pytest.raises(InvalidInput) as raised:
        secrets.generate(tmp_path)
    assert raised.value.field == "line 1"


def _ports() -> dict[str, str]:
    return {port_variable(name): str(port) for name, port in default_ports(34000).items()}
