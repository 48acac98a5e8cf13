"""`eru tenant create|set|ls`: who owns workloads, their fairness weight, guaranteed quota and limit
(docs/fairness-and-scoring.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from eru.cli.app import app, group
from eru.cli.bus_client import (
    DEFAULT_STATE_DIR,
    NatsOption,
    StateDirOption,
    TimeoutOption,
    all_pages,
    console,
    fail,
    nats_url,
    number,
    operation,
    refuse_invalid,
    run_with_bus,
)
from eru.cli.failure import typed_as
from eru.cli.output import Format, JsonOption, OutputOption, chosen, document, emit, operation_document

if TYPE_CHECKING:
    from rich.table import Table

tenant_app = group(
    "Tenants: weight, quota and limit per resource; create, set, ls, rm, credentials.", no_args_is_help=True
)
app.add_typer(tenant_app, name="tenant")

AmountsHelp = "Per resource, e.g. cpu=4,memory=8GiB (cpu in cores; memory in bytes or with a unit)."


def parse_amounts(text: str | None, option: str) -> dict[str, str] | None:
    """`cpu=4,memory=8GiB` → {"cpu": "4", "memory": "8GiB"}; `none` (or empty) → {} (no quota / no limit)."""
    if text is None:
        return None
    if text.strip().lower() in ("", "none"):
        return {}
    amounts: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.partition("=")
        if not name or not value:
            fail(f"{option}: expected resource=amount pairs such as cpu=4,memory=8GiB, got {part!r}", code=2)
        amounts[name.strip()] = value.strip()
    return amounts


def _amounts_text(amounts: dict[str, Any]) -> str:
    from eru.units import format_bytes

    parts = []
    for name, value in amounts.items():
        parts.append(f"{name}={format_bytes(int(value)) if name == 'memory' else f'{value:g}'}")
    return " ".join(parts) or "-"


def tenant_table(rows: list[dict[str, Any]], title: str) -> Table:
    """The tenant tree: per tenant (its groups indented under it) weight, quota, limit, reserved, what it holds, the
    quota guarantee still owed and the weighted dominant share at its level."""
    from rich.table import Table

    from eru.units import format_bytes

    table = Table(title=title)
    columns = (
        "tenant",
        "weight",
        "quota",
        "limit",
        "reserved",
        "cpu",
        "memory",
        "containers",
        "waiting",
        "guarantee left",
        "dominant share",
    )
    for column in columns:
        table.add_column(column, justify="right" if column in ("weight", "containers", "waiting") else "left")
    for row in rows:
        allocated = row.get("allocated", {})
        share = row.get("dominant_share", 0.0)
        resource = row.get("dominant_resource")
        group = row.get("level") == 2
        name = row["name"]
        table.add_row(
            f"  └ {name.split('/', 1)[1]}" if group else name,
            f"{row['weight']:g}",
            "" if group else _amounts_text(row.get("quota", {})),
            "" if group else _amounts_text(row.get("limit", {})),
            "" if group else _amounts_text(row.get("reserved", {})),
            f"{allocated.get('cpu', 0):g}",
            format_bytes(int(allocated.get("memory", 0))),
            number(row.get("allocations", 0)),
            number(row.get("waiting", 0)),
            "" if group else _amounts_text({k: v for k, v in row.get("guarantee_left", {}).items() if v}),
            f"{share:.3f}" + (f" ({resource})" if resource else ""),
        )
    return table


TENANT_OPTIONS = {"name": "NAME", "weight": "--weight", "quota": "--quota", "limit": "--limit"}
"""The options behind a tenant request's fields, for errors (eru.cli.failure.typed_as)."""


def _check_locally(fields: dict[str, Any]) -> None:
    """What the allocator checks of a weight, quota and limit (eru.fairness.tenant_config), checked before sending:
    `--weight x` is refused here, naming the option."""
    from eru.errors import InvalidInput
    from eru.fairness.quantities import parse_weight
    from eru.fairness.tenant_config import parse_amounts as checked_amounts

    try:
        if fields["weight"] is not None:
            parse_weight(fields["weight"], "weight")
        for name in ("quota", "limit"):
            checked_amounts(fields[name], name)
    except InvalidInput as error:
        refuse_invalid(error, TENANT_OPTIONS)


def _request(model: Any, **fields: Any) -> Any:
    """`model` of the verb's options; a field it refuses is named as the option (exit 2)."""
    from pydantic import ValidationError

    try:
        return model(**fields)
    except ValidationError as error:
        refuse_invalid(error, TENANT_OPTIONS)


def _send(name: str, request: Any, nats: str | None, state_dir: Any, timeout: float) -> Any:
    return run_with_bus(nats_url(nats, state_dir), lambda nc: operation(nc, name, request, timeout))


def _print(reply: Any, schema: str, fmt: Format) -> None:
    """The reply of a change: its message, or with -o json|yaml its document (eru.cli.output.operation_document)."""
    if fmt is Format.text:
        console.print(reply.message)
    else:
        emit(operation_document(schema, reply), fmt)


@tenant_app.command("create")
def tenant_create(
    name: str,
    weight: Annotated[str, typer.Option(help="Fairness weight (> 0): weights 1:2 give dominant shares 1:2.")] = "1",
    quota: Annotated[str | None, typer.Option(help=f"Guaranteed quota. {AmountsHelp}")] = None,
    limit: Annotated[str | None, typer.Option(help=f"Most the tenant may hold in a pod. {AmountsHelp}")] = None,
    credentials: Annotated[
        bool, typer.Option(help="Also issue the tenant's client credentials (see `eru tenant credentials`).")
    ] = False,
    out: Annotated[Path | None, typer.Option("--out", help="With --credentials: write them here (0600).")] = None,
    output: OutputOption = Format.text,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 5.0,
) -> None:
    """Create a tenant, or a group TENANT/GROUP of one (a weight only); deploys name either with `--tenant`. The
    `default` tenant always exists."""
    from eru.domain.tenants import TenantCreateRequest

    typed_as(TENANT_OPTIONS)
    fields = {"weight": weight, "quota": parse_amounts(quota, "--quota") or {}}
    fields["limit"] = parse_amounts(limit, "--limit") or {}
    _check_locally(fields)
    request = _request(TenantCreateRequest, name=name, **fields)
    reply = _send("tenant-create", request, nats, state_dir, timeout)
    if output is Format.text:
        console.print(reply.message)
    issued: dict[str, str] = {}
    if credentials:
        from eru.cli.credentials_commands import issue

        issued = issue(name, state_dir.resolve(), rotate=False, out=out, fmt=output)
    if output is not Format.text:
        emit(operation_document("tenant-create", reply, credentials=issued or None), output)


@tenant_app.command("set")
def tenant_set(
    name: str,
    weight: Annotated[str | None, typer.Option(help="Fairness weight (> 0).")] = None,
    quota: Annotated[str | None, typer.Option(help=f"Guaranteed quota ('none' removes it). {AmountsHelp}")] = None,
    limit: Annotated[str | None, typer.Option(help=f"Limit ('none' removes it). {AmountsHelp}")] = None,
    output: OutputOption = Format.text,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 5.0,
) -> None:
    """Change a tenant's weight, quota or limit; options left out keep their value."""
    from eru.domain.tenants import TenantSetRequest

    typed_as(TENANT_OPTIONS)
    fields = {"weight": weight, "quota": parse_amounts(quota, "--quota"), "limit": parse_amounts(limit, "--limit")}
    _check_locally(fields)
    request = _request(TenantSetRequest, name=name, **fields)
    _print(_send("tenant-set", request, nats, state_dir, timeout), "tenant-set", output)


@tenant_app.command("rm")
def tenant_rm(
    name: str,
    output: OutputOption = Format.text,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 5.0,
) -> None:
    """Remove a tenant that holds no live container and no waiting request (`default` always stays)."""
    from eru.domain.tenants import TenantRemoveRequest

    typed_as(TENANT_OPTIONS)
    _print(_send("tenant-rm", TenantRemoveRequest(name=name), nats, state_dir, timeout), "tenant-rm", output)


@tenant_app.command("ls")
def tenant_ls(
    pod: Annotated[str | None, typer.Option(help="Allocation and shares in this pod (default: all pods).")] = None,
    output: OutputOption = Format.text,
    as_json: JsonOption = False,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 5.0,
) -> None:
    """Every tenant and its groups: weight, quota, limit, reservations, what it holds, waiting requests, the quota
    guarantee still owed, weighted dominant share per level; the pod's quota headroom in the title."""
    from eru.domain.tenants import TenantListRequest

    reply = run_with_bus(
        nats_url(nats, state_dir), lambda nc: all_pages(nc, "tenant-ls", TenantListRequest(pod=pod), timeout)
    )
    fmt = chosen(output, as_json)
    if fmt is not Format.text:
        emit(document("tenant-ls", scope=reply.message, tenants=reply.rows, warnings=list(reply.warnings)), fmt)
        return
    console.print(tenant_table(reply.rows, f"tenants ({reply.message})"))
    for warning in reply.warnings:
        console.print(f"[yellow]warning:[/] {warning}")


# `eru tenant reserve|unreserve|reservations` and `eru tenant credentials` live in their own modules; `eru tenant …`
# imports only this one (app.VERBS), which registers them on tenant_app
from eru.cli import (  # noqa: E402 - after tenant_app, which they import
    credentials_commands,  # noqa: F401
    reservation_commands,  # noqa: F401
)
