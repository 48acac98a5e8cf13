"""`eru up`, `eru down`, `eru status`, `eru provision`: the embedded local stack and its health."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from eru.bus.connection import redact
from eru.cli.app import app
from eru.errors import EruError
from eru.redaction import redact_text
from eru.stack import SERVICES, StackInfo, pid_alive

console = Console()
err_console = Console(stderr=True)

StateDir = Annotated[Path, typer.Option("--state-dir", help="Where the stack keeps its data, logs and stack.json.")]


def fail(message: str, code: int = 2) -> None:
    """Print one readable line and exit."""
    err_console.print(f"[bold red]error:[/] {redact_text(message)}", highlight=False)
    raise typer.Exit(code)


@app.command()
def up(
    state_dir: StateDir = Path(".state"),
    nats: Annotated[str | None, typer.Option("--nats", help="Use this NATS server instead of an embedded one.")] = None,
    database: Annotated[str | None, typer.Option("--database", help="Use this PostgreSQL DSN instead.")] = None,
    nats_port: Annotated[int, typer.Option(help="Port of the embedded nats-server.")] = 14222,
    postgres_port: Annotated[int, typer.Option(help="Port of the embedded PostgreSQL.")] = 15432,
    sim_nodes: Annotated[int, typer.Option(help="Simulated nodes served by the node agent (0 = none).")] = 4,
    docker_node: Annotated[bool, typer.Option(help="Also run a node agent on the local Docker engine.")] = False,
    detach: Annotated[bool, typer.Option(help="Return once everything is up (stop it with `eru down`).")] = False,
    auth: Annotated[
        bool, typer.Option(help="NATS users per role with subject permissions (embedded NATS only; docs/security.md).")
    ] = True,
) -> None:
    """Start NATS, PostgreSQL and the four services; Ctrl-C stops everything."""
    from eru.stack_runner import StackOptions, run_stack

    options = StackOptions(
        state_dir=state_dir.resolve(),
        nats_url=nats,
        database_dsn=database,
        nats_port=nats_port,
        postgres_port=postgres_port,
        sim_nodes=sim_nodes,
        docker_node=docker_node,
        auth=auth,
    )
    try:
        run_stack(options, console=console, detach=detach)
    except EruError as error:
        fail(error.message)


@app.command()
def down(state_dir: StateDir = Path(".state")) -> None:
    """Stop a stack started by `eru up` (in another terminal or with --detach)."""
    info = StackInfo.load(state_dir)
    if info is None or not pid_alive(info.supervisor_pid):
        fail(f"no running stack under {state_dir}", code=1)
        return
    os.kill(info.supervisor_pid, signal.SIGTERM)
    console.print(f"asked the stack (pid {info.supervisor_pid}) to stop")


async def _ping_services(url: str, wait_seconds: float) -> list[dict[str, Any]]:
    from eru.bus.connection import connect
    from eru.bus.discovery import discover_services

    nc = await connect(url, name="eru-status", connect_timeout=wait_seconds)
    try:
        return await discover_services(nc, wait_seconds=wait_seconds)
    finally:
        await nc.close()


async def _database_ok(dsn: str, wait_seconds: float) -> str:
    from eru.store.pool import check_database

    return await check_database(dsn, timeout=wait_seconds)


@app.command()
def status(
    state_dir: StateDir = Path(".state"),
    nats: Annotated[str | None, typer.Option("--nats", help="NATS URL (default: the running stack's).")] = None,
    database: Annotated[str | None, typer.Option("--database", help="PostgreSQL DSN (default: the stack's).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for answers.")] = 2.0,
) -> None:
    """Health of every component: NATS, PostgreSQL, and each running replica of each service."""
    info = StackInfo.load(state_dir)
    nats_url = nats or (info.nats_url if info else None)
    dsn = database or (info.database_dsn if info else None)
    if nats_url is None or dsn is None:
        fail(f"no stack under {state_dir}: start one with `eru up`, or pass --nats and --database")
        return
    table = Table(title="eru status")
    for column in ("component", "replica", "version", "state", "detail"):
        table.add_column(column)
    healthy = True
    try:
        replicas = asyncio.run(_ping_services(nats_url, timeout))
        table.add_row("nats", "", "", "[green]up[/]", redact(nats_url))
    except EruError as error:
        replicas = []
        healthy = False
        table.add_row("nats", "", "", "[red]down[/]", redact_text(error.message))
    try:
        version = asyncio.run(_database_ok(dsn, timeout))
        table.add_row("postgres", "", version, "[green]up[/]", redact_text(dsn))
    except EruError as error:
        healthy = False
        table.add_row("postgres", "", "", "[red]down[/]", redact_text(error.message))
    seen = {str(r["service"]) for r in replicas}
    for replica in sorted(replicas, key=lambda r: (str(r["service"]), str(r["replica"]))):
        state = "[green]ready[/]" if replica.get("ready") else "[yellow]starting[/]"
        table.add_row(
            str(replica["service"]),
            str(replica["replica"]),
            str(replica["version"]),
            state,
            str(replica.get("load", "")),
        )
        healthy &= bool(replica.get("ready"))
    for service in SERVICES:
        if service not in seen:
            healthy = False
            table.add_row(service, "", "", "[red]missing[/]", "no replica answered $SRV.PING")
    console.print(table)
    raise typer.Exit(0 if healthy else 1)


@app.command()
def provision(
    nats: Annotated[str | None, typer.Option("--nats", envvar="ERU_BUS__URL", help="NATS URL.")] = None,
    database: Annotated[str | None, typer.Option("--database", envvar="ERU_STORE__DSN", help="PostgreSQL DSN.")] = None,
) -> None:
    """Apply database migrations and create/update the JetStream streams, then exit (the compose one-shot step)."""
    from eru.stack_runner import provision_all

    try:
        asyncio.run(provision_all(nats or "nats://127.0.0.1:4222", database or "postgresql://postgres@127.0.0.1/eru"))
    except EruError as error:
        fail(error.message, code=3)
    console.print("provisioned: migrations applied, streams up to date")
