"""`eru workload ls|rm|stop|start|restart` and `eru container stop|start|restart|dissociate`: workloads and
containers as a unit (docs/cli.md "Workloads"). Each change answers with what it asked of which container and what
it left as it was; a repeat changes nothing more."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from eru.cli.bus_client import (
    DEFAULT_STATE_DIR,
    NatsOption,
    StateDirOption,
    TimeoutOption,
    console,
    nats_url,
    operation,
    query_all,
    refuse_invalid,
    run_with_bus,
)
from eru.cli.container_commands import container_app
from eru.cli.output import Format, JsonOption, OutputOption, cell, chosen, document, emit, operation_document

if TYPE_CHECKING:
    from rich.table import Table

from eru.cli.workload_group import workload_app

PodOption = Annotated[str | None, typer.Option(help="Only the workload's instances in this pod.")]
TenantOption = Annotated[str | None, typer.Option(help="The workload's tenant (when two tenants use the name).")]
ReasonOption = Annotated[str, typer.Option(help="Why (recorded on the node commands).")]
OPTIONS = {"workload": "NAME", "pod": "--pod", "tenant": "--tenant", "reason": "--reason", "container_ids": "ID"}


def workload_table(rows: list[dict[str, Any]]) -> Table:
    """One row per workload: its instances by state, health, deploys."""
    from rich.table import Table

    table = Table(title="workloads")
    for column in ("workload", "pod", "tenant", "image", "instances", "health", "deploys"):
        table.add_column(column, overflow="fold")
    for row in rows:
        instances = " ".join(f"{state} {count}" for state, count in row["instances"].items())
        table.add_row(
            cell(row["name"]),
            cell(row["pod"]),
            cell(row["tenant"]),
            cell(", ".join(row["images"])),
            instances,
            row["health"],
            str(row["deploys"]),
        )
    return table


@workload_app.command("ls")
def workload_ls(
    pod: Annotated[str | None, typer.Option(help="Only this pod.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Count removed and failed instances too.")] = False,
    output: OutputOption = Format.text,
    as_json: JsonOption = False,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 5.0,
) -> None:
    """Workloads with their instances by state, health and deploys (a tenant's credentials: its own)."""
    from eru.domain.messages import QueryRequest

    request = QueryRequest(what="workloads", pod=pod, include_gone=all_)
    reply = run_with_bus(nats_url(nats, state_dir), lambda nc: query_all(nc, request, timeout))
    fmt = chosen(output, as_json)
    if fmt is not Format.text:
        emit(document("workload-ls", workloads=reply.rows), fmt)
        return
    console.print(workload_table(reply.rows))


def _send(
    name: str, schema: str, fields: dict[str, Any], nats: str | None, state_dir: Any, timeout: float, fmt: Format
) -> None:
    from pydantic import ValidationError

    from eru.domain.messages import LifecycleRequest

    try:
        request = LifecycleRequest(**fields)
    except ValidationError as error:
        refuse_invalid(error, OPTIONS)
    reply = run_with_bus(nats_url(nats, state_dir), lambda nc: operation(nc, name, request, timeout))
    if fmt is not Format.text:
        emit(operation_document(schema, reply), fmt)
        return
    console.print(reply.message)
    for row in reply.rows:
        if "to" in row:
            console.print(f"  {row['id']} on {row['node']}: {row['from']} → {row['to']}")
        else:
            console.print(f"  {row['id']} on {row['node']}")
    for warning in reply.warnings:
        console.print(f"[yellow]unchanged:[/] {warning}")


def _workload_verb(verb: str, operation_name: str, summary: str) -> None:
    def command(
        name: Annotated[str, typer.Argument(help="The workload's name.")],
        pod: PodOption = None,
        tenant: TenantOption = None,
        reason: ReasonOption = "",
        output: OutputOption = Format.text,
        nats: NatsOption = None,
        state_dir: StateDirOption = DEFAULT_STATE_DIR,
        timeout: TimeoutOption = 10.0,
    ) -> None:
        fields = {"workload": name, "pod": pod, "tenant": tenant, "reason": reason}
        _send(operation_name, f"workload-{verb}", fields, nats, state_dir, timeout, output)

    command.__doc__ = summary
    workload_app.command(verb)(command)


def _container_verb(verb: str, summary: str) -> None:
    def command(
        container_ids: Annotated[list[str], typer.Argument(help="Container ids.")],
        reason: ReasonOption = "",
        output: OutputOption = Format.text,
        nats: NatsOption = None,
        state_dir: StateDirOption = DEFAULT_STATE_DIR,
        timeout: TimeoutOption = 10.0,
    ) -> None:
        fields = {"container_ids": container_ids, "reason": reason}
        _send(verb, f"container-{verb}", fields, nats, state_dir, timeout, output)

    command.__doc__ = summary
    container_app.command(verb)(command)


_workload_verb("rm", "remove-workload", "Remove every live instance of a workload; resources return as agents confirm.")
_workload_verb("stop", "stop", "Stop a workload's running instances; a stopped container keeps its allocation.")
_workload_verb("start", "start", "Start a workload's stopped instances (on the allocation they kept).")
_workload_verb("restart", "restart", "Restart a workload's running and stopped instances in place.")
_container_verb("stop", "Stop containers; a stopped container keeps its allocation (docs/cli.md).")
_container_verb("start", "Start stopped containers on the allocation they kept.")
_container_verb("restart", "Restart containers in place (stop, then start, same allocation).")
_container_verb(
    "dissociate", "Stop managing containers without stopping them: the ledger releases them, the engine keeps them."
)


# `eru workload replace|history` live in their own module; `eru workload …` imports this one only (eru.cli.app.VERBS)
from eru.cli import workload_replace_commands  # noqa: E402, F401
