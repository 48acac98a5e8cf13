"""The supervisor behind `eru up`: start servers and services, watch them, stop everything on a signal."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console
from rich.table import Table

from eru.bus.connection import redact
from eru.errors import EruError
from eru.stack.auth import (
    ADMIN_URL_FILE,
    POSTGRES_PASSWORD_FILE,
    StackAccounts,
    generate_stack_accounts,
    persistent_password,
    write_private,
)
from eru.stack.info import (
    MEMBER_ENV,
    StackError,
    StackInfo,
    ensure_port_free,
    open_private_log,
    output_path,
    python_module,
    stop_processes,
    storage_settings,
    tail,
)
from eru.stack.launch import StackOptions, command_groups, group_nodes, node_agents, service_launchers
from eru.stack.provision import provision_all
from eru.stack.readiness import StackNotReady, crash_report, failure_message, http_ready
from eru.stack.supervisor import (
    Child,
    RestartPolicy,
    identity,
    popen_child,
    probe_readiness,
    startup,
    supervise_once,
)

# `eru up` and `eru demo` import these from here.
__all__ = ["StackOptions", "provision_all", "run_stack"]

_SERVERS = ("nats-server", "postgres")
DETACH_START_SECONDS = 120.0  # what `--detach` allows for the servers, provisioning and the console


def _server_child(name: str, server: Any) -> Child:
    """An embedded server (NatsServer, EmbeddedPostgres) as a supervised child: restarted on its port and data."""

    def start() -> int:
        server.start()
        pid: int = server.pid
        return pid

    def exit_code() -> int | None:
        return None if server.pid is not None else -1

    return Child(name, start, exit_code, pid=server.pid)


def _summary(info: StackInfo) -> Table:
    table = Table(title="eru is up")
    table.add_column("component")
    table.add_column("where")
    table.add_column("pid")
    table.add_column("metrics")
    servers = [name for name in info.server_pids if name.startswith("nats-") and name != "nats-server"]
    where = "embedded" if info.embedded_nats else "external"
    table.add_row("nats", redact(info.nats_url), f"{where} cluster of {len(servers)}" if servers else where)
    table.add_row("postgres", redact(info.database_dsn), "embedded" if info.embedded_postgres else "external")
    for name, pid in info.processes.items():
        table.add_row(name, info.logs[name], str(pid), info.metrics.get(name, ""))
    return table


def run_stack(options: StackOptions, *, console: Console, detach: bool = False) -> int | None:
    """Start everything and block until SIGINT/SIGTERM (or, with `detach`, until everything is up); returns the
    signal that stopped it (SIGINT: `eru up` then exits 130, docs/cli.md), None when detached."""
    options.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    options.state_dir.chmod(0o700)  # logs, credentials and data: the owner's only (docs/security.md)
    existing = StackInfo.load(options.state_dir)
    if existing is not None and existing.supervisor_alive():
        raise StackError(f"a stack is already running from {options.state_dir} (pid {existing.supervisor_pid})")
    if detach:
        _detach(options, console)
        return None
    from eru.embedded.postgres_server import EmbeddedPostgres
    from eru.stack.cluster import EmbeddedNats, check_cluster_size

    check_cluster_size(options.nats_cluster)
    if options.nats_cluster > 1 and options.nats_url is not None:
        raise StackError("--nats-cluster runs embedded nats-servers: it cannot be combined with --nats")

    nats: EmbeddedNats | None = None
    postgres: EmbeddedPostgres | None = None
    services: dict[str, Callable[[], subprocess.Popen[bytes] | None]] = {}
    stop_requested = False
    stopped_by: int | None = None

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stop_requested, stopped_by
        stop_requested = True
        stopped_by = signum

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if existing is not None:
            _clean_up_after_dead_supervisor(options.state_dir, console)
        if options.console_port:
            ensure_port_free(options.console_port, "web console")
        nats_url = options.nats_url
        accounts: StackAccounts | None = None
        cli_url = nats_url  # the operator's: what `eru` on this machine uses (stack.json)
        admin_url = nats_url  # provisioning only
        if nats_url is None:
            ensure_port_free(options.nats_port, "nats-server")
            if options.auth:
                accounts = generate_stack_accounts(options.state_dir, node_agents(options), command_groups(options))
            config = accounts.config_file if accounts else None
            nats = EmbeddedNats(options.state_dir, options.nats_cluster, options.nats_port, config_file=config)
            nats.start()
            nats_url = nats.url
            cli_url = accounts.accounts["operator"].url(nats_url) if accounts else nats_url
            admin_url = accounts.accounts["admin"].url(nats_url) if accounts else nats_url
            if accounts is not None:
                # the stack owner's superuser (tests and fault injection speak as agents with it); 0600, new per start
                write_private(options.state_dir / "auth" / ADMIN_URL_FILE, admin_url + "\n")
        assert cli_url is not None
        assert admin_url is not None
        dsn = options.database_dsn
        services_dsn = dsn
        if dsn is None:
            ensure_port_free(options.postgres_port, "postgres")
            postgres = EmbeddedPostgres(
                options.state_dir / "postgres",
                port=options.postgres_port,
                password=persistent_password(options.state_dir / "auth" / POSTGRES_PASSWORD_FILE),
            )
            postgres.start()
            postgres.create_database("eru")
            dsn = postgres.dsn_for("eru")
            # the services on this machine speak over its Unix socket: 0.7-0.9x the CPU of loopback TCP per round
            # trip, client and server (docs/operations.md "PostgreSQL over its Unix socket"); `--postgres-over tcp`
            # gives them loopback TCP (the fault suite's outage runs over both)
            services_dsn = postgres.socket_dsn_for("eru") if options.postgres_over == "socket" else dsn
        replicas = nats.replicas if nats is not None else 1
        asyncio.run(provision_all(admin_url, dsn, replicas, groups=group_nodes(options)))
        metrics: dict[str, str] = {}
        children: list[Child] = []
        if nats is not None:
            children += [_server_child(name, server) for name, server in nats.servers.items()]
        if postgres is not None:
            children.append(_server_child("postgres", postgres))
        info = StackInfo(
            state_dir=str(options.state_dir),
            nats_url=cli_url,
            database_dsn=dsn,
            supervisor_pid=os.getpid(),
            embedded_nats=nats is not None,
            embedded_postgres=postgres is not None,
            metrics=metrics,
            ports={**(nats.ports if nats is not None else {})}
            | ({"postgres": options.postgres_port} if postgres is not None else {}),
            settings=storage_settings(),
        )
        assert services_dsn is not None
        launchers = service_launchers(options, nats_url, services_dsn, accounts, metrics)
        console_login = None
        if options.console_port is not None:
            from eru.console.launch import start_console_process

            console_log = options.state_dir / "logs" / "console.log"
            port = options.console_port
            member = {MEMBER_ENV: str(options.state_dir)}
            launchers["console"] = lambda: start_console_process(
                options.state_dir, cli_url, port, console_log, extra_env=member
            )
        for name, launch in launchers.items():
            log = options.state_dir / "logs" / f"{name}.log"
            # a service replica is ready when its /readyz says so; the console once it listens (below)
            probe = http_ready(metrics[name]) if name in metrics else None
            child, current = popen_child(name, launch, probe, output_path(log) if name in metrics else log)
            child.launch(time.monotonic())
            children.append(child)
            services[name] = current
            info.logs[name] = str(log)
        if "console" in services:
            from eru.console.launch import wait_for_console

            process = services["console"]()
            assert process is not None
            try:
                web = wait_for_console(options.state_dir, process)
            except EruError as error:
                lines = "\n".join(tail(Path(info.logs["console"])))
                raise StackError(f"{error.message}; last log lines:\n{lines}") from None
            info.console_url, console_login = web.url, web.login_url(time.time())
        # stack.json appears once everything was started, "starting" until every process is ready (`--detach` waits
        # for "up" or "failed"); a supervisor killed before that leaves processes `eru down` still finds by their
        # ERU_STACK_MEMBER / command lines (eru.stack.stop)
        info.state = "starting"
        _record(info, children)
        console.print(f"started {len(launchers)} processes; waiting until every one is ready …", highlight=False)
        policy = RestartPolicy()
        ready_by = time.monotonic() + options.ready_seconds
        while not stop_requested:
            changed = supervise_once(children, policy, lambda line: console.print(line, highlight=False))
            changed = probe_readiness(children) or changed
            if changed:
                info.crash_loops = crash_report(children, policy)
                _record(info, children)
            if info.state != "up":
                _judge_start(info, children, policy, ready_by, options, console, console_login)
            time.sleep(0.2)
        console.print("stopping …")
    finally:
        # services first, all at once (each drains into the servers), then PostgreSQL and NATS
        running = {name: process for name, current in services.items() if (process := current()) is not None}
        stop_processes(running)
        if postgres is not None:
            postgres.stop()
        if nats is not None:
            nats.stop()
        with contextlib.suppress(FileNotFoundError):
            (options.state_dir / "stack.json").unlink()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    console.print("stopped: no process left behind")
    return stopped_by


def _judge_start(
    info: StackInfo,
    children: list[Child],
    policy: RestartPolicy,
    ready_by: float,
    options: StackOptions,
    console: Console,
    console_login: str | None,
) -> None:
    """While the stack starts: once every process is ready, record "up" and say so; when one is crash-looping or
    the deadline passed, record "failed" and why, and raise `StackNotReady` (unless the stack is to be kept running
    for a look, as under `--detach`, whose caller reports the failure from stack.json). A failed stack kept running
    that becomes ready after all (a process fixed itself, a slow one caught up) is "up" from then on."""
    state = startup(children, policy)
    timed_out = not state.ready and not state.looping and time.monotonic() > ready_by
    if state.ready:
        info.state, info.failure = "up", None
        _record(info, children)
        console.print(_summary(info))
        if console_login is not None:
            console.print(f"web console: {console_login}", soft_wrap=True, highlight=False)
        if options.observability is not None:
            from eru.observability import write_observability

            for path in write_observability(options.observability, info):
                console.print(f"observability: wrote {path}")
        console.print("Ctrl-C stops everything; `eru status` shows health.")
    elif info.state == "starting" and (state.looping or timed_out):
        info.state = "failed"
        info.failure = failure_message(state, children, timed_out=options.ready_seconds if timed_out else None)
        info.crash_loops = crash_report(children, policy)
        _record(info, children)
        if not options.keep_failed:
            raise StackNotReady(info.failure)
        console.print(info.failure, highlight=False)
        console.print("kept running for a look; `eru down` stops it", highlight=False)


def _print_console_login(options: StackOptions, console: Console) -> None:
    """The console's one-time login URL, once the stack's console listens (docs/console.md)."""
    if options.console_port is None:
        return
    from eru.console.launch import ConsoleInfo

    info = ConsoleInfo.load(options.state_dir)
    if info is not None:
        console.print(f"web console: {info.login_url(time.time())}", soft_wrap=True, highlight=False)


def _record(info: StackInfo, children: list[Child]) -> None:
    """stack.json with every child's pid and identity, restart counts and give-ups (what `eru status` and `eru down`
    read)."""
    info.processes = {c.name: c.pid for c in children if c.pid is not None and not _is_server(c.name)}
    info.server_pids = {c.name: c.pid for c in children if c.pid is not None and _is_server(c.name)}
    identities = {"supervisor": identity(os.getpid())}
    identities |= {c.name: identity(c.pid) for c in children if c.pid is not None}
    info.identities = {name: value for name, value in identities.items() if value is not None}
    info.restarts = {c.name: c.restarts for c in children}
    info.gave_up = {c.name: c.gave_up for c in children if c.gave_up is not None}
    info.save()


def _is_server(name: str) -> bool:
    """Whether a child is an embedded server (`nats-server`, a cluster's `nats-<i>`, `postgres`)."""
    return name in _SERVERS or (name.startswith("nats-") and name[5:].isdigit())


def _clean_up_after_dead_supervisor(state_dir: Path, console: Console) -> None:
    """A stack.json whose supervisor is gone (killed -9): stop what it left behind before starting afresh."""
    from eru.stack.stop import stop_stack

    report = stop_stack(state_dir)
    if report.stopped:
        console.print(f"stopped what a dead supervisor left behind: {', '.join(report.stopped)}")


def _detach(options: StackOptions, console: Console) -> None:
    args = python_module("eru.cli", "up", "--state-dir", str(options.state_dir))
    args += ["--nats-port", str(options.nats_port), "--postgres-port", str(options.postgres_port)]
    args += ["--sim-nodes", str(options.sim_nodes), "--nats-cluster", str(options.nats_cluster)]
    for service, count in sorted(options.replicas.items()):
        args += ["--replicas", f"{service}={count}"]
    if options.sim_node_cpus is not None:
        args += ["--sim-node-cpus", str(options.sim_node_cpus)]
    if options.sim_node_memory is not None:
        args += ["--sim-node-memory", str(options.sim_node_memory)]
    if options.nats_url:
        args += ["--nats", options.nats_url]
    if options.database_dsn:
        args += ["--database", options.database_dsn]
    args += ["--postgres-over", options.postgres_over]
    if options.docker_node:
        args.append("--docker-node")
    if not options.auth:
        args.append("--no-auth")
    args += ["--console-port", str(options.console_port)] if options.console_port is not None else ["--no-console"]
    if options.observability is not None:
        args += ["--observability", str(options.observability)]
    # a start that fails leaves the stack running, so that `eru status` and `eru logs` show what went wrong
    args += ["--ready-timeout", f"{options.ready_seconds:g}", "--keep-failed"]
    log = options.state_dir / "logs" / "supervisor.log"
    with open_private_log(log) as log_file:
        process = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    # the servers, provisioning and the console first (each with its own deadline), then the services' readiness
    limit = options.ready_seconds + DETACH_START_SECONDS
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        info = StackInfo.load(options.state_dir)
        if info is not None and info.supervisor_pid == process.pid and info.state == "up":
            console.print(_summary(info))
            _print_console_login(options, console)
            return
        if info is not None and info.supervisor_pid == process.pid and info.state == "failed":
            raise StackNotReady(f"{info.failure}\nthe stack is left running for a look; `eru down` stops it")
        if process.poll() is not None:
            raise StackError("the stack failed to start:\n" + "\n".join(tail(log, 10)))
        time.sleep(0.2)
    process.terminate()
    raise StackError(f"the stack did not start within {limit:g} s; see {log}")
