"""`eru reconcile [--dry-run] [-o json]`: the ledger against what the nodes really run (docs/operations.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from eru.cli.app import app
from eru.cli.bus_client import (
    DEFAULT_STATE_DIR,
    NatsOption,
    StateDirOption,
    TimeoutOption,
    console,
    err_console,
    nats_url,
    operation,
    run_with_bus,
)
from eru.cli.failure import typed_as
from eru.cli.output import Format, JsonOption, OutputOption, chosen, document, emit

if TYPE_CHECKING:
    from rich.table import Table

COLUMNS = ("node", "kind", "container_id", "ledger_state", "node_state", "action", "detail")


def findings_table(rows: list[dict[str, Any]], *, dry_run: bool) -> Table:
    """One line per difference: what the ledger says, what the node runs, and what is (or would be) done."""
    from rich.table import Table

    table = Table(title="reconcile (dry run: nothing changed)" if dry_run else "reconcile")
    for column in COLUMNS:
        table.add_column(column.replace("_", " "), overflow="fold")
    for row in rows:
        table.add_row(*(str(row.get(column) or "-") for column in COLUMNS))
    return table


@app.command("reconcile")
def reconcile(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the differences, change nothing.")] = False,
    node: Annotated[str | None, typer.Option(help="Only this node.")] = None,
    pod: Annotated[str | None, typer.Option(help="Only this pod's nodes.")] = None,
    output: OutputOption = Format.text,
    as_json: JsonOption = False,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Compare the ledger with each node's newest inventory: lost containers are released, unknown ones removed,
    drifted resources set again (by policy); with --dry-run only shown. Operator verb."""
    from eru.domain.inventory import ReconcileRequest

    typed_as({"node": "--node", "pod": "--pod"})
    request = ReconcileRequest(node=node, pod=pod, dry_run=dry_run)
    reply = run_with_bus(nats_url(nats, state_dir), lambda nc: operation(nc, "reconcile", request, timeout))
    fmt = chosen(output, as_json)
    if fmt is not Format.text:
        fields = {"dry_run": dry_run, "message": reply.message, "warnings": reply.warnings, "findings": reply.rows}
        emit(document("reconcile", **fields), fmt)
        return
    for warning in reply.warnings:
        err_console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    if reply.rows:
        console.print(findings_table(reply.rows, dry_run=dry_run))
    console.print(reply.message, highlight=False)
