"""`eru deploy ls` (every deploy, newest first, page by page), `eru deploy status ID` and `eru deploy watch ID`: deploys
made earlier (docs/cli.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from eru.cli.bus_client import (
    DEFAULT_STATE_DIR,
    NatsOption,
    StateDirOption,
    TimeoutOption,
    console,
    fail,
    nats_url,
    query_all,
    run_with_bus,
)
from eru.cli.deploy_commands import TERMINAL, DeployResult, deploy_app, placement_table
from eru.cli.failure import Kind
from eru.cli.output import Format, JsonOption, OutputOption, cell, chosen, document, emit, emit_line

if TYPE_CHECKING:
    from nats.aio.client import Client


@deploy_app.command("ls")
def deploy_ls(
    pod: Annotated[str | None, typer.Option(help="Only deploys to this pod.")] = None,
    limit: Annotated[
        int | None, typer.Option(min=1, help="At most this many, the newest (default: all, read page by page).")
    ] = None,
    output: OutputOption = Format.text,
    as_json: JsonOption = False,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 10.0,
) -> None:
    """Deploys, newest first: status, workload, instances by state, decision id (every page of the record)."""
    from eru.cli.bus_client import all_pages
    from eru.domain.messages import PAGE_SIZE, QueryRequest

    async def read(nc: Client) -> list[dict[str, Any]]:
        first = QueryRequest(what="deploys", pod=pod, limit=min(limit or PAGE_SIZE, PAGE_SIZE))
        return list((await all_pages(nc, "query", first, timeout, max_rows=limit)).rows)

    rows = run_with_bus(nats_url(nats, state_dir), read)
    fmt = chosen(output, as_json)
    if fmt is not Format.text:
        emit(document("deploy-ls", deploys=rows), fmt)
        return
    from rich.table import Table

    table = Table(title=f"deploys ({len(rows)})", title_justify="left")
    for column in ("deploy", "created", "pod", "tenant", "workload", "count", "status", "instances", "decision"):
        table.add_column(column, justify="right" if column == "count" else "left")
    for row in rows:
        states = row.get("states") or {}
        table.add_row(
            str(row["id"]),
            str(row.get("created_at") or "")[:19],
            cell(row.get("pod")),
            cell(row.get("tenant")),
            cell(row.get("workload")),
            str(row.get("count") or 0),
            str(row.get("status") or ""),
            " ".join(f"{state}:{n}" for state, n in sorted(states.items())),
            str(row.get("decision_id") or ""),
        )
    console.print(table)


def refuse_unless_deploy_id(value: str) -> None:
    """Refuse, naming DEPLOY_ID, what can be neither a deploy id (a UUID) nor a request id (at most 128 characters,
    `--request-id`), before anything is asked (exit 2)."""
    from eru.domain.limits import text

    try:
        text(value, "a deploy or request id")
    except ValueError as error:
        fail(f"DEPLOY_ID: {error}", Kind.invalid_input, field="DEPLOY_ID")
    if len(value) > REQUEST_ID_MAX:
        reason = f"{len(value):,} characters, above the limit of {REQUEST_ID_MAX} of a deploy or request id"
        fail(f"DEPLOY_ID: {reason}", Kind.invalid_input, field="DEPLOY_ID")


REQUEST_ID_MAX = 128  # DeployRequest.request_id's max_length


@deploy_app.command("status")
def deploy_status(
    deploy_id: str,
    output: OutputOption = Format.text,
    as_json: JsonOption = False,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 5.0,
) -> None:
    """A deploy's status, decision id and containers (by deploy id or request id)."""
    from eru.domain.messages import QueryRequest

    refuse_unless_deploy_id(deploy_id)
    reply = run_with_bus(
        nats_url(nats, state_dir),
        lambda nc: query_all(nc, QueryRequest(what="deploy", deploy_id=deploy_id), timeout),
    )
    deploy = reply.rows[0]["deploy"]
    result = deploy.get("result") or {}
    decision = result.get("decision_id") if isinstance(result, dict) else None
    fmt = chosen(output, as_json)
    if fmt is not Format.text:
        emit(
            document("deploy-status", deploy=deploy, decision_id=decision, containers=reply.rows[0]["containers"]), fmt
        )
        return
    console.print(f"deploy {deploy['id']} (request {deploy['request_id']}): [bold]{deploy['status']}[/]")
    if decision:
        console.print(f"decision id: {decision}  (why: eru explain {decision})", highlight=False)
    error = (deploy.get("result") or {}).get("error")
    if error:
        console.print(f"[red]{error['code']}[/]: {error['message']}")
    terminal = type("Terminal", (), {"kind": deploy["status"]})()
    console.print(placement_table(DeployResult(deploy["id"], terminal, reply.rows[0]["containers"])))


def event_line(subject: str, event: Any) -> str:
    """One deploy event for people: its subject and what it says (`n1=2 n2=1`, `c-1: reason`, the error)."""
    if event.error is not None:
        detail = f"{event.error.code}: {event.error.message}"
    elif event.failed:
        detail = ", ".join(f"{container}: {reason}" for container, reason in event.failed.items())
    else:
        detail = " ".join(f"{node}={count}" for node, count in event.placements.items())
    if not detail and event.started:
        detail = "started " + " ".join(event.started)
    return f"{subject}  {detail}".rstrip()


@deploy_app.command("watch")
def deploy_watch(
    deploy_id: str,
    output: OutputOption = Format.text,
    as_json: JsonOption = False,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 120.0,
) -> None:
    """Print a deploy's events (from the start, replayed from JetStream) until its terminal event; exit 1 unless it
    completed. With -o json one `eru.cli/deploy-event` per line (-o yaml: per document)."""
    refuse_unless_deploy_id(deploy_id)
    fmt = chosen(output, as_json)

    async def follow(nc: Client) -> str:
        import asyncio

        from eru.bus.codec import decode
        from eru.bus.subjects import deploy_events
        from eru.cli.bus_client import operation
        from eru.domain import DeployEvent
        from eru.domain.messages import QueryRequest

        # an unknown id is not found at once (exit 4), not a wait for events that never come
        await operation(nc, "query", QueryRequest(what="deploy", deploy_id=deploy_id), min(timeout, 10.0))
        js = nc.jetstream()
        subscription = await js.subscribe(deploy_events(deploy_id), ordered_consumer=True)
        try:
            async with asyncio.timeout(timeout):
                while True:
                    msg = await subscription.next_msg(timeout=timeout)
                    event = decode(msg.data, DeployEvent)
                    if fmt is Format.text:
                        console.print(event_line(msg.subject, event), highlight=False, markup=False)
                    else:
                        fields = event.model_dump(mode="json")
                        emit_line(document("deploy-event", subject=msg.subject, **fields), fmt)
                    if event.kind in TERMINAL:
                        return event.kind
        finally:
            await subscription.unsubscribe()

    kind = run_with_bus(nats_url(nats, state_dir), follow)
    if kind != "completed":
        raise typer.Exit(1)
