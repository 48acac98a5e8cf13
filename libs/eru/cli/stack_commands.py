"""`eru up`, `eru down`, `eru status`, `eru provision`: the embedded local stack and its health."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from eru.cli.app import app
from eru.cli.bus_client import (
    DEFAULT_STATE_DIR,
    DatabaseOption,
    NatsOption,
    StateDirOption,
    console,
    fail,
    fail_with,
    run_async,
)
from eru.cli.output import Format, JsonOption, OutputOption, chosen, document, emit
from eru.errors import EruError

# Services every stack runs (eru.stack.info.SERVICES, repeated here so that `eru --help` does not import eru.stack).
SERVICES = ("allocator", "distributor", "node-agent", "eviction")


@app.command()
def up(
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    nats: Annotated[str | None, typer.Option("--nats", help="Use this NATS server instead of an embedded one.")] = None,
    database: Annotated[str | None, typer.Option("--database", help="Use this PostgreSQL DSN instead.")] = None,
    nats_port: Annotated[
        int, typer.Option(help="Port of the embedded nats-server (of a cluster's first; the others follow it).")
    ] = 14222,
    nats_cluster: Annotated[
        int,
        typer.Option(
            help="Embedded nats-servers: 1, or a cluster of 3 to 5 with every stream on 3 of them (docs/deploy.md)."
        ),
    ] = 1,
    postgres_port: Annotated[int, typer.Option(help="Port of the embedded PostgreSQL.")] = 15432,
    postgres_over: Annotated[
        str,
        typer.Option(
            help="How the services reach the embedded PostgreSQL: socket (its Unix socket) or tcp (loopback)."
        ),
    ] = "socket",
    sim_nodes: Annotated[int, typer.Option(help="Simulated nodes served by the node agent (0 = none).")] = 4,
    replicas: Annotated[
        list[str] | None,
        typer.Option(
            "--replicas",
            help="Processes of a service, SERVICE=N (repeatable; allocator, distributor, eviction, node-agent: "
            "node-agent replicas split the sim nodes). Allocators split the pods between them (docs/replicas.md).",
        ),
    ] = None,
    sim_node_cpus: Annotated[
        int | None, typer.Option("--sim-node-cpus", help="Cores of each simulated node (default: the agent's).")
    ] = None,
    sim_node_memory: Annotated[
        str | None, typer.Option("--sim-node-memory", help="Memory of each simulated node, e.g. 64GiB.")
    ] = None,
    docker_node: Annotated[bool, typer.Option(help="Also run a node agent on the local Docker engine.")] = False,
    detach: Annotated[bool, typer.Option(help="Return once everything is up (stop it with `eru down`).")] = False,
    auth: Annotated[
        bool, typer.Option(help="NATS users per role with subject permissions (embedded NATS only; docs/security.md).")
    ] = True,
    with_console: Annotated[
        bool, typer.Option("--console/--no-console", help="Serve the web console (docs/console.md).")
    ] = True,
    console_port: Annotated[int, typer.Option(help="Port of the web console (0 = any free port).")] = 14280,
    observability: Annotated[
        Path | None,
        typer.Option(
            help="Write a Prometheus scrape config (prometheus.yml) and a Grafana dashboard (grafana-dashboard.json) "
            "for every replica's /metrics port into this directory (docs/operations.md)."
        ),
    ] = None,
    ready_timeout: Annotated[
        float,
        typer.Option(
            help="Seconds every process has to be ready; `eru up` fails (exit 1) naming those that are not, and at "
            "once for one that keeps crashing before it is ready (docs/operations.md)."
        ),
    ] = 300.0,
    keep_failed: Annotated[
        bool,
        typer.Option("--keep-failed", hidden=True, help="On a failed start, keep the stack running (--detach's)."),
    ] = False,
    output: OutputOption = Format.text,
) -> None:
    """Start NATS, PostgreSQL and the four services (each replica serving /metrics); Ctrl-C stops everything. With
    -o json|yaml the progress goes to stderr and the `eru.cli/up` document to stdout once `up` returns."""
    from eru.cli.consoles import make_console
    from eru.cli.up_options import parse_ready_timeout, parse_replicas, parse_sim_node_cpus, parse_sim_node_memory
    from eru.stack.readiness import StackNotReady
    from eru.up.runner import StackOptions, run_stack

    if postgres_over not in ("socket", "tcp"):
        fail(f"--postgres-over: expected socket or tcp, got {postgres_over!r}", code=2)
    try:
        counts = parse_replicas(replicas or [])
        cpus = parse_sim_node_cpus(sim_node_cpus)
        memory = parse_sim_node_memory(sim_node_memory)
        ready_seconds = parse_ready_timeout(ready_timeout)
    except EruError as error:
        fail(error.message, code=2)
    options = StackOptions(
        state_dir=state_dir.resolve(),
        nats_url=nats,
        database_dsn=database,
        nats_port=nats_port,
        postgres_port=postgres_port,
        sim_nodes=sim_nodes,
        docker_node=docker_node,
        auth=auth,
        console_port=console_port if with_console else None,
        observability=observability.resolve() if observability else None,
        replicas=counts,
        sim_node_cpus=cpus,
        sim_node_memory=memory,
        nats_cluster=nats_cluster,
        postgres_over=postgres_over,
        ready_seconds=ready_seconds,
        keep_failed=keep_failed,
    )
    try:
        # a file or a pipe (`eru up --detach > file`): nothing cut at 80 columns (eru.cli.consoles)
        stopped_by = run_stack(options, console=make_console(stderr=output is not Format.text), detach=detach)
    except StackNotReady as error:  # it started, and a process of it is crash-looping or not ready in time
        fail(error.message, code=1)
    except EruError as error:
        fail(error.message, code=2)
    import signal

    if output is not Format.text:
        emit(_up_document(options.state_dir, detach, stopped_by), output)

    if stopped_by == signal.SIGINT:  # Ctrl-C: a clean stop, reported as every verb reports an interrupt
        raise typer.Exit(130)


def _up_document(state_dir: Path, detach: bool, stopped_by: int | None) -> dict[str, Any]:
    """The `eru.cli/up` document: where the stack is and how to reach it (no password), or how it stopped."""
    from eru.bus.connection import redact
    from eru.stack.info import StackInfo

    info = StackInfo.load(state_dir) if detach else None
    return document(
        "up",
        state_dir=str(state_dir),
        detached=detach,
        running=info is not None,
        nats_url=redact(info.nats_url) if info is not None else None,
        console_url=getattr(info, "console_url", None) if info is not None else None,
        metrics=dict(info.metrics) if info is not None else {},
        stopped_by=stopped_by,
    )


@app.command()
def down(state_dir: StateDirOption = DEFAULT_STATE_DIR, output: OutputOption = Format.text) -> None:
    """Stop a stack started by `eru up`, even one whose supervisor was killed; returns when every process is gone
    and the ports are free. Nothing running is not an error: `eru down` twice stops it once (exit 0 both times)."""
    from eru.stack.info import StackInfo
    from eru.stack.stop import stop_stack

    state_dir = state_dir.resolve()
    recorded = StackInfo.load(state_dir) is not None
    try:
        report = stop_stack(state_dir)  # without stack.json: whatever of the stack a dying `eru up` left
    except EruError as error:
        fail(error.message, code=1)
    nothing = not recorded and not report.stopped
    if output is not Format.text:
        fields = {"supervisor": report.supervisor, "stopped": report.stopped, "ports": report.ports}
        emit(document("down", state_dir=str(state_dir), nothing_running=nothing, **fields), output)
        return
    if nothing:
        console.print(f"nothing running under {state_dir}", highlight=False)
        return
    if report.supervisor == "dead":
        console.print("the supervisor was gone: stopped what it left behind")
    for label in report.stopped:
        console.print(f"stopped {label}")
    ports = ", ".join(map(str, report.ports)) or "none"
    console.print(f"stopped: no process left behind (ports free: {ports})")


async def _ping_services(
    url: str, wait_seconds: float, streams: list[dict[str, Any]] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """Every replica that answers, and every durable consumer's health (None when the bus would not tell); with
    `streams` (a list to fill), each stream's copies and leader (eru.stack.cluster.stream_placement)."""
    import asyncio
    import contextlib

    from eru.bus.connection import connect
    from eru.bus.consumer_health import gather
    from eru.bus.discovery import discover_services

    nc = await connect(url, name="eru-status", connect_timeout=wait_seconds)
    try:
        replicas = await discover_services(nc, wait_seconds=wait_seconds)
        consumers: list[dict[str, Any]] | None = None
        with contextlib.suppress(Exception):  # a user without JetStream rights still gets the replicas
            consumers = await asyncio.wait_for(gather(nc.jetstream()), timeout=max(wait_seconds, 2.0) * 2)
        if streams is not None:
            from eru.stack.cluster import stream_placement

            with contextlib.suppress(Exception):
                streams[:] = await asyncio.wait_for(stream_placement(nc.jetstream()), timeout=max(wait_seconds, 2.0))
        return replicas, consumers
    finally:
        await nc.close()


async def _database_ok(dsn: str, wait_seconds: float) -> str:
    from eru.store.pool import check_database

    return await check_database(dsn, timeout=wait_seconds)


def status_document(
    *,
    nats: dict[str, Any],
    postgres: dict[str, Any],
    replicas: list[dict[str, Any]],
    restarts: dict[str, int] | None = None,
    console_url: str | None = None,
    metrics: dict[str, str] | None = None,
    consumers: list[dict[str, Any]] | None = None,
    gave_up: dict[str, str] | None = None,
    crash_loops: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    """The `eru.cli/status` document (docs/cli.md): servers, then per service its replicas with state, restarts and
    metrics URL. `restarts` (replica or process → count) comes from the supervisor when it records them, as do
    `gave_up` (process → why the supervisor stopped restarting it) and `crash_loops` (process → why it is
    crash-looping and its last error line); either makes the stack unhealthy."""
    services = []
    known_metrics = metrics or {}
    for service in sorted({*SERVICES, *(str(r["service"]) for r in replicas)}):
        rows = sorted((r for r in replicas if r["service"] == service), key=lambda r: str(r["replica"]))
        entries = []
        for row in rows:
            replica = str(row["replica"])
            metrics_url = row.get("metrics") or known_metrics.get(replica) or known_metrics.get(service)
            entries.append(
                {
                    "replica": replica,
                    "version": str(row.get("version", "")),
                    "state": "ready" if row.get("ready") else "starting",
                    "restarts": None if restarts is None else int(restarts.get(replica, restarts.get(service, 0))),
                    "metrics_url": metrics_url,
                    "requests": int(row.get("requests", 0)),
                    "stats": dict(row.get("stats") or {}),
                }
            )
        state = "missing" if not entries else ("ready" if all(e["state"] == "ready" for e in entries) else "starting")
        own = [c for c in consumers or [] if c["service"] == service]
        degraded = [c for c in own if c["state"] == "degraded"]
        if state == "ready" and degraded:
            state = "degraded"  # up and answering, but a consumer is not keeping up (docs/operations.md)
        services.append(
            {"name": service, "state": state, "replicas": len(entries), "instances": entries, "consumers": own}
        )
    # "unknown" (no DSN given) does not count against health: a ready allocator has reached its database
    database_ok = postgres["state"] in ("up", "unknown")
    # "degraded": a cluster that lost a server but still serves (docs/deploy.md "The NATS cluster")
    healthy = (
        nats["state"] in ("up", "degraded")
        and database_ok
        and all(s["state"] in ("ready", "degraded") for s in services)
    )
    healthy = healthy and not gave_up and not crash_loops
    if restarts is not None:
        nats_restarts = sum(int(n) for name, n in restarts.items() if name.startswith("nats-"))
        nats = {**nats, "restarts": nats_restarts}
        postgres = {**postgres, "restarts": int(restarts.get("postgres", 0))}
    return document(
        "status",
        healthy=healthy,
        degraded=sorted(
            [str(s["name"]) for s in services if s["state"] == "degraded"]
            + (["nats"] if nats["state"] == "degraded" else [])
        ),
        console_url=console_url,
        nats=nats,
        postgres=postgres,
        services=services,
        gave_up=dict(gave_up or {}),
        crash_looping={name: dict(entry) for name, entry in (crash_loops or {}).items()},
    )


@app.command()
def status(
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    nats: NatsOption = None,
    database: DatabaseOption = None,
    timeout: Annotated[float, typer.Option(envvar="ERU_TIMEOUT", help="Seconds to wait for answers.")] = 2.0,
    output: OutputOption = Format.text,
    as_json: JsonOption = False,
) -> None:
    """Health of every component: NATS, PostgreSQL, each replica of each service with its /metrics URL; exit 1
    when anything is not up and ready."""
    from eru.stack.info import StackInfo

    fmt = chosen(output, as_json)
    info = StackInfo.load(state_dir)
    nats_url = nats or (info.nats_url if info else None)
    dsn = database or (info.database_dsn if info else None)
    if nats_url is None:
        fail(f"no stack under {state_dir}: start one with `eru up`, or give --nats / ERU_BUS_URL", code=2)
    from eru.bus.connection import redact, split_urls
    from eru.redaction import redact_text

    clustered = len(split_urls(nats_url)) > 1
    streams: list[dict[str, Any]] = []
    try:
        replicas, consumers = run_async(_ping_services(nats_url, timeout, streams if clustered else None))
        nats_state: dict[str, Any] = {"state": "up", "url": redact(nats_url), "detail": ""}
    except EruError as error:
        replicas = []
        consumers = None
        nats_state = {"state": "down", "url": redact(nats_url), "detail": redact_text(error.message)}
    if clustered:  # every server of the cluster, and where each stream's copies are (docs/deploy.md)
        from eru.stack.cluster import server_states

        servers = server_states(nats_url)
        down = [server["address"] for server in servers if server["state"] != "up"]
        if down and nats_state["state"] == "up":
            nats_state["state"] = "degraded"
            nats_state["detail"] = f"{len(down)} of {len(servers)} servers down: {', '.join(down)}"
        nats_state |= {"servers": servers, "streams": streams}
    if dsn is None:  # a stack eru did not start, reached by its bus URL alone: the services speak for the database
        postgres_state = {"state": "unknown", "version": "", "detail": "give --database / ERU_DATABASE_URL to check"}
    else:
        try:
            version = run_async(_database_ok(dsn, timeout))
            postgres_state = {"state": "up", "version": version, "detail": ""}
        except EruError as error:
            postgres_state = {"state": "down", "version": "", "detail": redact_text(error.message)}
    doc = status_document(
        nats=nats_state,
        postgres={"dsn": redact(dsn) if dsn else None, **postgres_state},
        replicas=replicas,
        restarts=getattr(info, "restarts", None) if info else None,
        console_url=getattr(info, "console_url", None) if info else None,
        metrics=info.metrics if info else None,
        gave_up=info.gave_up if info else None,
        crash_loops=info.crash_loops if info else None,
        consumers=consumers,
    )
    from eru.cli.storage_commands import print_storage, storage_document

    # storage per table, stream (against its cap) and log; warnings before a cap is reached (docs/operations.md)
    doc["storage"] = storage_document(
        nats_url if nats_state["state"] == "up" else None,
        dsn if postgres_state["state"] == "up" else None,
        state_dir,
    )
    from eru.cli.status_watermarks import print_watermarks, watermarks_part

    # the eviction replicas' environment and every live override (docs/colocation.md); never fails the status
    doc["watermarks"] = watermarks_part(nats_url, replicas, timeout, nats_state["state"] != "down")
    if fmt is not Format.text:
        emit(doc, fmt)
    else:
        from eru.cli.status_text import print_status

        print_status(doc)
        print_storage(doc["storage"])
        print_watermarks(doc["watermarks"], console)
    raise typer.Exit(0 if doc["healthy"] else 1)


@app.command()
def provision(
    nats: Annotated[
        str | None, typer.Option("--nats", envvar=["ERU_BUS_URL", "ERU_BUS__URL"], help="NATS URL.")
    ] = None,
    database: DatabaseOption = None,
    output: OutputOption = Format.text,
) -> None:
    """Apply database migrations and create/update the JetStream streams, then exit (the compose one-shot step)."""
    from eru.stack.provision import provision_all

    try:
        # the streams' copies: ERU_BUS__STREAM_REPLICAS (3 on a cluster, docs/deploy.md)
        run_async(provision_all(nats or "nats://127.0.0.1:4222", database or "postgresql://postgres@127.0.0.1/eru"))
    except EruError as error:
        fail_with(error)
    if output is not Format.text:
        emit(document("provision", migrations="applied", streams="up to date"), output)
        return
    console.print("provisioned: migrations applied, streams up to date")
