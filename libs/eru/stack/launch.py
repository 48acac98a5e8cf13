"""What `eru up` was asked for (`StackOptions`) and how each service process of the stack is started: its
environment, its /metrics port and log, which sim nodes each node-agent process serves (docs/operations.md,
docs/replicas.md)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from eru.errors import InvalidInput
from eru.stack.auth import StackAccounts, sim_node_names
from eru.stack.info import MEMBER_ENV, SERVICES, start_service
from eru.stack.readiness import READY_SECONDS

SIM_PREFIX = "sim"
# The docker node agent serves this machine, under the name NodeAgentSettings gives it by default.
HOST_NODE = os.uname().nodename.split(".")[0]


@dataclass(frozen=True)
class StackOptions:
    """What `eru up` was asked for."""

    state_dir: Path
    nats_url: str | None
    database_dsn: str | None
    nats_port: int
    postgres_port: int
    sim_nodes: int
    docker_node: bool
    auth: bool = True
    console_port: int | None = 14280  # the web console (docs/console.md); None = no console
    observability: Path | None = None  # write a Prometheus scrape config and a Grafana dashboard here
    nats_cluster: int = 1  # embedded nats-servers: 1, or a cluster of 3 to 5 with R3 streams (eru.stack.cluster)
    # processes per service (docs/replicas.md); node-agent replicas split the sim nodes between them
    replicas: Mapping[str, int] = field(default_factory=dict)
    sim_node_cpus: int | None = None  # cores of each sim node (None: the agent's default)
    sim_node_memory: int | None = None  # bytes of each sim node (None: the agent's default)
    # how the services reach the embedded PostgreSQL: its Unix socket, or loopback TCP (docs/operations.md)
    postgres_over: str = "socket"
    # `eru up` says it is up once every process is ready, and fails after this many seconds (docs/operations.md)
    ready_seconds: float = READY_SECONDS
    # a start that fails (a crash loop, the deadline) leaves the stack running for a look instead of stopping it:
    # what the supervisor `--detach` starts does, so that `eru status` and `eru logs` show what went wrong
    keep_failed: bool = False

    def count(self, service: str) -> int:
        """How many processes of `service` the stack runs."""
        return self.replicas.get(service, 1)

    def replica_names(self, service: str) -> list[str]:
        """The process names of `service`: the service's own name for one, `<service>-1` … for several."""
        count = self.count(service)
        return [service] if count == 1 else [f"{service}-{index}" for index in range(1, count + 1)]


def service_env(nats_url: str, dsn: str, state_dir: Path, replicas: int = 1) -> dict[str, str]:
    """The environment every service process of the stack starts with."""
    return {
        "ERU_BUS__URL": nats_url,
        "ERU_BUS__STREAM_REPLICAS": str(replicas),
        "ERU_STORE__DSN": dsn,
        "ERU_STATE_DIR": str(state_dir),
        "ERU_LOG_FORMAT": "json",
        MEMBER_ENV: str(state_dir),
    }


def node_agents(options: StackOptions) -> dict[str, list[str]]:
    """Node-agent processes of the stack and the nodes each serves."""
    agents: dict[str, list[str]] = {}
    for process, prefix, count in sim_agents(options):
        agents[process] = sim_node_names(prefix, count)
    if options.docker_node:
        agents["node-agent-docker"] = [HOST_NODE]
    return agents


def command_groups(options: StackOptions) -> dict[str, str]:
    """Each sim node-agent process's command group (its node prefix): one consumer for all of its nodes, which the
    stack provisions (eru.bus.node_groups)."""
    return {process: prefix for process, prefix, _ in sim_agents(options)}


def group_nodes(options: StackOptions) -> dict[str, list[str]]:
    """Each command group of the stack and its nodes (what provisioning creates the group consumers over)."""
    return {prefix: sim_node_names(prefix, count) for _, prefix, count in sim_agents(options)}


def sim_agents(options: StackOptions) -> list[tuple[str, str, int]]:
    """The sim node-agent processes: (process name, node name prefix, nodes it serves). One agent serves
    `sim-001` …; with `--replicas node-agent=N` agent i serves `sim<i>-001` …, the nodes split evenly."""
    if options.sim_nodes <= 0:
        return []
    agents = min(options.count("node-agent"), options.sim_nodes)
    if agents == 1:
        return [("node-agent-sim", SIM_PREFIX, options.sim_nodes)]
    shares = split_nodes(options.sim_nodes, agents)
    return [(f"node-agent-sim-{i}", f"{SIM_PREFIX}{i}", n) for i, n in enumerate(shares, start=1)]


def split_nodes(total: int, agents: int) -> list[int]:
    """How many of `total` sim nodes each of `agents` processes serves: as even as possible, the first ones more.

    >>> split_nodes(10, 3)
    [4, 3, 3]
    """
    if agents < 1:
        raise InvalidInput("--replicas", f"node-agent={agents}: the count must be at least 1")
    base, extra = divmod(total, agents)
    return [base + (1 if index < extra else 0) for index in range(agents)]


SIM_SAMPLES_PER_SECOND = 200  # what all sim nodes of a stack send at most, by default (docs/replicas.md)


def sim_metrics_interval(sim_nodes: int) -> float:
    """Seconds between a sim node's metrics samples under `eru up`: 2 (a lively demo) until the stack's nodes would
    send more than `SIM_SAMPLES_PER_SECOND` together, then longer: 1,000 nodes sample every 5 s, 5,000 every 25 s."""
    return max(2.0, sim_nodes / SIM_SAMPLES_PER_SECOND)


def service_launchers(
    options: StackOptions,
    nats_url: str,
    dsn: str,
    accounts: StackAccounts | None = None,
    metrics: dict[str, str] | None = None,
) -> dict[str, Callable[[], subprocess.Popen[bytes]]]:
    """How to start each service replica (again, after a crash: same environment, same /metrics port, same log);
    each serves `/metrics` on its own loopback port, recorded in `metrics` (process name, as in stack.json → URL)."""
    from eru.embedded.nats_server import free_port
    from eru.stack.cluster import stream_replicas

    replicas = stream_replicas(options.nats_cluster) if options.nats_url is None else 1
    base_env = service_env(nats_url, dsn, options.state_dir, replicas)
    logs = options.state_dir / "logs"
    launchers: dict[str, Callable[[], subprocess.Popen[bytes]]] = {}
    endpoints = metrics if metrics is not None else {}

    def env_of(process: str, replica: str, account: str | None = None) -> dict[str, str]:
        port = free_port()
        endpoints[process] = f"http://127.0.0.1:{port}/metrics"
        return {
            **base_env,
            **(accounts.env_for(account or process, nats_url) if accounts else {}),
            "ERU_REPLICA": replica,
            "ERU_HEALTH_PORT": str(port),
        }

    def launcher(service: str, env: dict[str, str], log: Path) -> Callable[[], subprocess.Popen[bytes]]:
        return lambda: start_service(service, env, log)

    for service in SERVICES:
        if service == "node-agent":
            continue
        for index, process in enumerate(options.replica_names(service), start=1):
            env = env_of(process, f"{service}-{index}", account=service)
            launchers[process] = launcher(service, env, logs / f"{process}.log")
    for process, prefix, count in sim_agents(options):
        sim_env = {
            **env_of(process, process),
            "ERU_NODE_AGENT__RUNTIME": "sim",
            "ERU_NODE_AGENT__SIM_NODES": str(count),
            "ERU_NODE_AGENT__NODE": prefix,
            "ERU_NODE_AGENT__COMMAND_GROUP": prefix,
            # a lively demo by default; an environment that sets it (the scale bench) wins
            "ERU_NODE_AGENT__METRICS_INTERVAL_SECONDS": os.environ.get(
                "ERU_NODE_AGENT__METRICS_INTERVAL_SECONDS", str(sim_metrics_interval(options.sim_nodes))
            ),
        }
        if options.sim_node_cpus is not None:
            sim_env["ERU_NODE_AGENT__CPU_CORES"] = str(options.sim_node_cpus)
        if options.sim_node_memory is not None:
            sim_env["ERU_NODE_AGENT__MEMORY"] = str(options.sim_node_memory)
        launchers[process] = launcher("node-agent", sim_env, logs / f"{process}.log")
    if options.docker_node:
        docker_env = {
            **env_of("node-agent-docker", "node-agent-docker"),
            "ERU_NODE_AGENT__RUNTIME": "docker",
            "ERU_NODE_AGENT__NODE": HOST_NODE,
        }
        launchers["node-agent-docker"] = launcher("node-agent", docker_env, logs / "node-agent-docker.log")
    return launchers
