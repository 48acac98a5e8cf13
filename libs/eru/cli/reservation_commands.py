"""`eru tenant reserve|unreserve|reservations`: a node's resources held for one tenant (docs/fairness-and-scoring.md;
operators only).

Reserved resources are placed only for their tenant (and its groups) and count toward its quota, used or not
(docs/fairness-and-scoring.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from eru.cli.bus_client import (
    DEFAULT_STATE_DIR,
    NatsOption,
    StateDirOption,
    TimeoutOption,
    all_pages,
    console,
    nats_url,
    operation,
    run_with_bus,
)
from eru.cli.failure import typed_as
from eru.cli.output import Format, JsonOption, OutputOption, chosen, document, emit, operation_document
from eru.cli.tenant_commands import tenant_app

if TYPE_CHECKING:
    from rich.table import Table


RESERVE_OPTIONS = {"tenant": "TENANT", "node": "--node", "cpu": "--cpu", "memory": "--memory", "pod": "--pod"}
"""The options behind a reservation request's fields, for errors (eru.cli.failure.typed_as)."""


def _send(name: str, request: Any, nats: str | None, state_dir: Any, timeout: float) -> Any:
    return run_with_bus(nats_url(nats, state_dir), lambda nc: operation(nc, name, request, timeout))


def _print(reply: Any, schema: str, fmt: Format) -> None:
    if fmt is Format.text:
        console.print(reply.message)
    else:
        emit(operation_document(schema, reply), fmt)


@tenant_app.command("reserve")
def tenant_reserve(
    tenant: str,
    node: Annotated[str, typer.Option(help="The node whose resources are held.")],
    cpu: Annotated[str, typer.Option(help="Cores held for the tenant.")] = "0",
    memory: Annotated[str, typer.Option(help="Memory held for the tenant, e.g. 8GiB.")] = "0",
    output: OutputOption = Format.text,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 5.0,
) -> None:
    """Reserve CPU and memory on a node for a tenant (replaces its reservation there): placed only for it, counted
    toward its quota."""
    from eru.domain.tenants import TenantReserveRequest

    typed_as(RESERVE_OPTIONS)
    request = TenantReserveRequest(tenant=tenant, node=node, cpu=cpu, memory=memory)
    _print(_send("tenant-reserve", request, nats, state_dir, timeout), "tenant-reserve", output)


@tenant_app.command("unreserve")
def tenant_unreserve(
    tenant: str,
    node: Annotated[str, typer.Option(help="The node whose reservation goes.")],
    output: OutputOption = Format.text,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 5.0,
) -> None:
    """Drop a tenant's reservation on a node."""
    from eru.domain.tenants import TenantUnreserveRequest

    typed_as(RESERVE_OPTIONS)
    request = TenantUnreserveRequest(tenant=tenant, node=node)
    _print(_send("tenant-unreserve", request, nats, state_dir, timeout), "tenant-unreserve", output)


def reservation_table(rows: list[dict[str, Any]]) -> Table:
    """Per reservation: tenant, node, pod, reserved and used CPU and memory."""
    from rich.table import Table

    from eru.units import format_bytes

    table = Table(title="reservations")
    for column in ("tenant", "node", "pod", "cpu used/reserved", "memory used/reserved"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["tenant"],
            row["node"],
            row["pod"],
            f"{row['used_cpu']:g}/{row['cpu']:g}",
            f"{format_bytes(int(row['used_memory']))}/{format_bytes(int(row['memory']))}",
        )
    return table


@tenant_app.command("reservations")
def tenant_reservations(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's reservations.")] = None,
    pod: Annotated[str | None, typer.Option(help="Only reservations on this pod's nodes.")] = None,
    output: OutputOption = Format.text,
    as_json: JsonOption = False,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 5.0,
) -> None:
    """Every reservation with what its tenant's containers use of it."""
    from eru.domain.tenants import TenantReservationsRequest

    typed_as(RESERVE_OPTIONS)
    request = TenantReservationsRequest(tenant=tenant, pod=pod)
    reply = run_with_bus(nats_url(nats, state_dir), lambda nc: all_pages(nc, "tenant-reservations", request, timeout))
    fmt = chosen(output, as_json)
    if fmt is not Format.text:
        emit(document("tenant-reservations", reservations=reply.rows), fmt)
        return
    console.print(reservation_table(reply.rows))
