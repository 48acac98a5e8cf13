"""`eru container ls|inspect|rm|realloc|replace`: containers as the allocator records them, and changes to them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from eru.cli.app import app, group
from eru.cli.bus_client import (
    DEFAULT_STATE_DIR,
    NatsOption,
    StateDirOption,
    TimeoutOption,
    console,
    cpuset,
    fail,
    nats_url,
    operation,
    query_all,
    refuse_invalid,
    run_with_bus,
)
from eru.cli.failure import Kind, typed_as
from eru.cli.output import Format, JsonOption, OutputOption, cell, chosen, document, emit, operation_document

if TYPE_CHECKING:
    from rich.table import Table

container_app = group(
    "Containers: list, inspect, remove, realloc, replace, stop, start, restart, dissociate.", no_args_is_help=True
)
app.add_typer(container_app, name="container")


def container_table(rows: list[dict[str, Any]], title: str = "containers") -> Table:
    """One row per container."""
    from rich.table import Table

    from eru.units import format_bytes

    table = Table(title=title)
    for column in ("container", "workload", "node", "state", "health", "cpus", "memory", "image"):
        table.add_column(column, overflow="fold")
    for row in rows:
        allocation = row["allocation"]
        table.add_row(
            cell(row["id"]),
            cell(row["workload"]),
            cell(row["node"]),
            cell(row["state"]),
            cell(row.get("health") or "-"),
            cpuset(allocation.get("cpu_map") or {}),
            format_bytes(int(allocation.get("memory") or 0)),
            cell(row["image"]),
        )
    return table


def _query(nats: str | None, state_dir: Any, timeout: float, **fields: Any) -> Any:
    from eru.domain.messages import QueryRequest

    return run_with_bus(nats_url(nats, state_dir), lambda nc: query_all(nc, QueryRequest(**fields), timeout))


@container_app.command("ls")
def container_ls(
    pod: Annotated[str | None, typer.Option(help="Only this pod.")] = None,
    node: Annotated[str | None, typer.Option(help="Only this node.")] = None,
    deploy_id: Annotated[str | None, typer.Option("--deploy", help="Only this deploy.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Include removed and failed containers.")] = False,
    output: OutputOption = Format.text,
    as_json: JsonOption = False,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 5.0,
) -> None:
    """Live containers (with --all, also removed and failed ones); cpus in the cpuset notation (docs/cli.md)."""
    reply = _query(
        nats, state_dir, timeout, what="containers", pod=pod, node=node, deploy_id=deploy_id, include_gone=all_
    )
    fmt = chosen(output, as_json)
    if fmt is not Format.text:
        emit(document("container-ls", containers=reply.rows), fmt)
        return
    console.print(container_table(reply.rows))


@container_app.command("inspect")
def container_inspect(
    container_id: str,
    output: OutputOption = Format.json,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 5.0,
) -> None:
    """Everything recorded about one container, as JSON (or -o yaml)."""
    typed_as({"container_id": "CONTAINER_ID"})
    reply = _query(nats, state_dir, timeout, what="containers", container_id=container_id, include_gone=True)
    if not reply.rows:
        fail(f"unknown container {container_id!r}", Kind.not_found, field="container_id")
    if output is Format.yaml:
        emit(document("container", container=reply.rows[0]), output)
        return
    console.print_json(json.dumps(document("container", container=reply.rows[0])))


def _send(name: str, model: Any, nats: str | None, state_dir: Any, timeout: float, fmt: Format) -> Any:
    reply = run_with_bus(nats_url(nats, state_dir), lambda nc: operation(nc, name, model, timeout))
    if fmt is not Format.text:
        emit(operation_document(f"container-{name}", reply), fmt)
        return None
    console.print(reply.message)
    for warning in reply.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    return reply


@container_app.command("rm")
def container_rm(
    container_ids: list[str],
    reason: Annotated[str, typer.Option(help="Why (recorded on the command).")] = "",
    output: OutputOption = Format.text,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 5.0,
) -> None:
    """Stop and remove containers; their resources return when the node agent confirms."""
    from pydantic import ValidationError

    from eru.domain.messages import RemoveRequest

    typed_as(RM_OPTIONS)
    try:
        request = RemoveRequest(container_ids=container_ids, reason=reason)
    except ValidationError as error:  # an id that names nothing, a reason over 256 characters
        refuse_invalid(error, RM_OPTIONS)
    _send("remove", request, nats, state_dir, timeout, output)


RM_OPTIONS = {"container_ids": "CONTAINER_IDS", "reason": "--reason"}
REALLOC_OPTIONS = {
    "container_ids": "CONTAINER_IDS",
    "cpu_request": "--cpu",
    "cpu_limit": "--cpu-limit",
    "memory_request": "--memory",
    "memory_limit": "--memory-limit",
    "cpu_bind": "--cpu-bind",
    "keep_cpu_bind": "--keep-cpu-bind",
}
REPLACE_OPTIONS = {
    "container_id": "CONTAINER_ID",
    "image": "--image",
    "command": "--command",
    "health_timeout_seconds": "--health-timeout",
}
"""The options behind each request's fields, for errors (eru.cli.failure.typed_as)."""


@container_app.command("realloc")
def container_realloc(
    container_ids: list[str],
    cpu: Annotated[float, typer.Option(help="CPU request delta in cores (+0.5, -1).")] = 0.0,
    cpu_limit: Annotated[float, typer.Option(help="CPU limit delta in cores.")] = 0.0,
    memory: Annotated[str, typer.Option(help="Memory request delta (256MiB, -256MiB).")] = "0",
    memory_limit: Annotated[str, typer.Option(help="Memory limit delta.")] = "0",
    cpu_bind: Annotated[bool | None, typer.Option("--cpu-bind/--no-cpu-bind", help="Bind (absolute).")] = None,
    keep_cpu_bind: Annotated[bool, typer.Option(help="Keep bound containers bound.")] = False,
    output: OutputOption = Format.text,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 10.0,
) -> None:
    """Change running containers' resources by deltas (docs/planning.md), applied in place by the node agent."""
    from pydantic import ValidationError

    from eru.domain.messages import ReallocRequest

    typed_as(REALLOC_OPTIONS)
    try:
        request = ReallocRequest(
            container_ids=container_ids,
            cpu_request=cpu,
            cpu_limit=cpu_limit,
            memory_request=memory,
            memory_limit=memory_limit,
            cpu_bind=cpu_bind,
            keep_cpu_bind=keep_cpu_bind,
        )
    except ValidationError as error:
        refuse_invalid(error, REALLOC_OPTIONS)
    reply = _send("realloc", request, nats, state_dir, timeout, output)
    if reply is not None and reply.rows:
        console.print(container_table(reply.rows, title="new allocations"))


@container_app.command("replace")
def container_replace(
    container_id: str,
    image: Annotated[str | None, typer.Option(help="New image.")] = None,
    command: Annotated[str | None, typer.Option(help="New command line.")] = None,
    health_timeout: Annotated[float, typer.Option(help="Seconds the new container has to become healthy.")] = 10.0,
    output: OutputOption = Format.text,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 10.0,
) -> None:
    """Update a container in place (docs/planning.md): the new one takes the old one's allocation."""
    from pydantic import ValidationError

    from eru.domain.messages import ReplaceRequest

    typed_as(REPLACE_OPTIONS)
    try:
        request = ReplaceRequest(
            container_id=container_id,
            image=image,
            command=command.split() if command else None,
            health_timeout_seconds=health_timeout,
        )
    except ValidationError as error:
        refuse_invalid(error, REPLACE_OPTIONS)
    _send("replace", request, nats, state_dir, timeout, output)


# `eru container stop|start|restart|dissociate` live with the workload verbs (one request model, one renderer), and
# `eru container logs` with exec: each registers on container_app
from eru.cli import exec_commands, workload_commands  # noqa: E402, F401
