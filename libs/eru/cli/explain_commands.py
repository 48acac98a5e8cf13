"""`eru explain DECISION_ID`: why a recorded deploy decision placed its instances where it did — per node, placed or
not, and for every node not chosen the reason with its numbers (room, free cores, free memory, the limiting
resource). Reads the decision over the bus (`query decision`), so it works against any stack; the explanation is
`eru.decision_view`, the same the web console shows (docs/cli.md, docs/replay.md)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from eru.cli.app import app
from eru.cli.bus_client import (
    DEFAULT_STATE_DIR,
    DatabaseOption,
    NatsOption,
    StateDirOption,
    TimeoutOption,
    console,
    current_tenant,
    fail,
    nats_url,
    operation,
    run_async,
    run_with_bus,
)
from eru.cli.explain_eviction import EVICTION_ID, eviction_document, eviction_event, print_eviction
from eru.cli.output import Format, JsonOption, OutputOption, chosen, document, emit, render

if TYPE_CHECKING:
    from nats.aio.client import Client

_NUMBER_NAMES = {
    "free_cpu": "free cores",
    "cpu_bound": "fits by cpu",
    "free_memory": "free memory",
    "memory_bound": "fits by memory",
    "cores": "cores",
    "cores_needed": "cores needed",
    "limited_by": "limited by",
}


def _decoded(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def explanation(row: dict[str, Any]) -> dict[str, Any]:
    """The `eru.cli/explain` document of one recorded decision row (`{"id", "kind", "input", "output", …}`)."""
    from eru.decision_view import explain_deploy_decision

    problem, output = _decoded(row.get("input")) or {}, _decoded(row.get("output")) or {}
    kind = str(row.get("kind", ""))
    if kind != "deploy":
        return document("explain", decision_id=row.get("id"), kind=kind, explained=False, output=output)
    view = explain_deploy_decision(problem, output)
    return document("explain", decision_id=row.get("id"), kind=kind, explained=True, **view)


def _numbers(entry: dict[str, Any]) -> str:
    from eru.units import format_bytes

    parts = []
    for key, label in _NUMBER_NAMES.items():
        value = entry.get(key)
        if value is None:
            continue
        if key == "free_memory":
            value = format_bytes(int(value))
        elif isinstance(value, float):
            value = f"{value:g}"
        parts.append(f"{label} {value}")
    return ", ".join(parts)


def _print(doc: dict[str, Any]) -> None:
    from rich.table import Table

    if not doc["explained"]:
        console.print(f"decision {doc['decision_id']} is a {doc['kind']} decision; its recorded output:")
        console.print(render(doc["output"], Format.yaml), highlight=False, markup=False)
        return
    asked = f"{doc['count']} instance{'s' if doc['count'] != 1 else ''}"
    console.print(f"decision {doc['decision_id']}: mode {doc['mode']}, {asked} asked", highlight=False)
    placed = Table(title="chosen")
    for column in ("node", "instances", "room for", "numbers"):
        placed.add_column(column, justify="left" if column in ("node", "numbers") else "right", overflow="fold")
    for entry in doc["placed"]:
        numbers = _numbers(entry.get("numbers") or {})
        placed.add_row(entry["node"], str(entry["instances"]), str(entry["capacity"]), numbers)
    console.print(placed)
    total = doc["not_chosen_total"]
    if not total:
        console.print("not chosen: none (every node of the pod got instances)")
        _print_error(doc)
        return
    counted = ", ".join(f"{count} {reason}" for reason, count in (doc.get("not_chosen_counts") or {}).items())
    title = f"not chosen ({len(doc['not_chosen'])} of {total} shown, left out first, then least room: {counted})"
    skipped = Table(title=title)
    for column in ("node", "room for", "reason", "why", "numbers"):
        skipped.add_column(column, overflow="fold", justify="right" if column == "room for" else "left")
    for entry in doc["not_chosen"]:
        room = "-" if entry.get("capacity") is None else str(entry["capacity"])
        numbers = "" if entry.get("capacity") is None else _numbers(entry.get("numbers") or {})
        skipped.add_row(entry["node"], room, entry.get("reason", ""), entry["why"], numbers)
    console.print(skipped)
    _print_error(doc)


def _print_error(doc: dict[str, Any]) -> None:
    error = doc.get("error")
    if error:
        from rich.markup import escape

        console.print(f"[red]refused[/] ({error.get('code')}): {escape(str(error.get('message')))}", highlight=False)


@app.command()
def explain(
    decision_id: Annotated[
        str,
        typer.Argument(
            metavar="DECISION_ID", help="What `eru deploy` printed as decision id, or an eviction decision id."
        ),
    ],
    output: OutputOption = Format.text,
    as_json: JsonOption = False,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    database: DatabaseOption = None,
    timeout: TimeoutOption = 10.0,
) -> None:
    """Why a decision chose what it chose: a deploy decision per node (placed or not, why not, with the numbers); an
    eviction decision (`<node>-<ms>-evict`) with the node's window and every batch container considered."""
    from eru.bus import RemoteError
    from eru.cli.failure import typed_as
    from eru.cli.replay_commands import refuse_unless_id
    from eru.domain.messages import QueryRequest
    from eru.stack.info import StackInfo

    refuse_unless_id(decision_id, "DECISION_ID")
    typed_as({"decision_id": "DECISION_ID"})
    info = StackInfo.load(state_dir)
    dsn = database or (info.database_dsn if info is not None and current_tenant() is None else None)
    query = QueryRequest(what="decision", decision_id=decision_id)

    async def ask(nc: Client) -> dict[str, Any] | None:
        try:
            reply = await operation(nc, "query", query, timeout)
        except RemoteError as error:
            if error.code != "reply_too_large" or dsn is None:
                raise
            return None  # a decision over thousands of nodes does not fit one bus message: read the record itself
        row: dict[str, Any] = reply.rows[0]
        return row

    async def find(nc: Client) -> dict[str, Any] | None:
        eviction = EVICTION_ID.fullmatch(decision_id) and current_tenant() is None  # a tenant reads no streams
        body = await eviction_event(nc, decision_id) if eviction else None
        if body is not None:
            return eviction_document(decision_id, body)
        row = await ask(nc)
        return None if row is None else explanation(row)

    doc = run_with_bus(nats_url(nats, state_dir), find)
    if doc is None:
        assert dsn is not None
        doc = explanation(run_async(_recorded(dsn, decision_id)))
    fmt = chosen(output, as_json)
    if fmt is not Format.text:
        emit(doc, fmt)
        return
    if doc.get("kind") == "evict":
        print_eviction(doc)
        return
    _print(doc)


async def _recorded(dsn: str, decision_id: str) -> dict[str, Any]:
    """The decision row as `query decision` answers it, read from PostgreSQL (its full input, snapshot expanded, and
    its full answer)."""
    from eru.decision_answer import full_answer
    from eru.store.decisions import decision_input
    from eru.store.pool import connect

    conn = await connect(dsn)
    try:
        row = await conn.fetchrow("SELECT id, kind, output FROM decisions WHERE id = $1", decision_id)
        problem = await decision_input(conn, decision_id) if row is not None else None
    finally:
        await conn.close()
    if row is None or problem is None:
        from eru.cli.failure import Kind

        fail(f"decision {decision_id} is no longer recorded (retention dropped it meanwhile)", Kind.not_found)
    output = full_answer(problem, json.loads(row["output"] or "{}"))  # every node's capacity (docs/replay.md)
    return {"id": row["id"], "kind": row["kind"], "input": problem, "output": output}
