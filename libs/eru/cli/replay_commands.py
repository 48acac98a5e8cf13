"""`eru replay <id>`: re-run a recorded allocation or eviction decision and compare (exit 0 same, 1 different).

The id may be a decision id (the `decision_id` of a deploy event or of an eviction event) or the `ce-id` of either
event. Allocation decisions are read from PostgreSQL (`decisions`), eviction decisions from the bus (their input
travels with the event). See docs/replay.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

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
from eru.cli.failure import Kind
from eru.cli.output import Format, JsonOption, OutputOption, chosen, document, emit
from eru.errors import EruError, InvalidInput

if TYPE_CHECKING:
    from eru.replay import RecordedDecision


class NotRecorded(EruError):
    """Nothing with that id is in the record."""

    code = "not_recorded"


async def _decision_row(dsn: str, decision_id: str) -> RecordedDecision | None:
    from eru.decision_answer import full_answer
    from eru.replay import RecordedDecision
    from eru.store.decisions import full_input
    from eru.store.pool import connect
    from eru.store.retention import expired_at

    conn = await connect(dsn)
    try:
        row = await conn.fetchrow("SELECT id, kind, input, output FROM decisions WHERE id = $1", decision_id)
        gone = await expired_at(conn, "decisions", decision_id) if row is None else None
        problem = await full_input(conn, json.loads(row["input"])) if row is not None else None
    finally:
        await conn.close()
    if gone is not None:
        dropped, until = gone
        raise NotRecorded(
            f"decision {decision_id} expired at {dropped.isoformat()} (retention dropped the decisions made before "
            f"{until.isoformat()}; ERU_RETENTION_SECONDS, docs/operations.md)"
        )
    if row is None or problem is None:
        return None
    output = full_answer(problem, json.loads(row["output"] or "{}"))  # every node's capacity (docs/replay.md)
    return RecordedDecision(row["id"], row["kind"], problem, output)


def _eviction_body(body: Any, wanted: str) -> bool:
    return isinstance(body, Mapping) and body.get("decision_id") == wanted and "input" in body


async def find_decision(identifier: str, nats_url: str | None, dsn: str | None) -> RecordedDecision:
    """The recorded decision behind `identifier` (decision id or event id), from PostgreSQL or the bus."""
    if dsn:
        found = await _decision_row(dsn, identifier)
        if found is not None:
            return found
    if nats_url is None:
        raise NotRecorded(f"no decision {identifier!r} in the database, and no NATS server to look for events")
    from eru.bus.connection import connect
    from eru.bus.history import Selection, read_history, read_stream
    from eru.bus.streams import DEPLOY, EVENTS
    from eru.replay import recorded_eviction

    nc = await connect(nats_url, name="eru-replay", connect_timeout=3)
    try:
        js = nc.jetstream()
        events = await read_history(js, (EVENTS, DEPLOY), Selection(message_id=identifier))
        if not events:  # an eviction decision id rather than an event id
            events = [
                m
                async for m in read_stream(js, EVENTS, subject_filter="eru.eviction.*")
                if _eviction_body(m.body, identifier)
            ]
    finally:
        await nc.close()
    if not events:
        raise NotRecorded(f"nothing recorded under {identifier!r} (neither a decision id nor a retained event id)")
    body = events[0].body
    if events[0].subject.startswith("eru.eviction.") and isinstance(body, Mapping):
        return recorded_eviction(body)
    decision_id = body.get("decision_id") if isinstance(body, Mapping) else None
    if not decision_id:
        raise InvalidInput("id", f"event {identifier!r} ({events[0].type}) records no decision")
    if not dsn:
        raise NotRecorded(f"event {identifier!r} refers to decision {decision_id}, which lives in the database")
    decision = await _decision_row(dsn, str(decision_id))
    if decision is None:
        raise NotRecorded(f"decision {decision_id} of event {identifier!r} is not in the database")
    return decision


def refuse_unless_id(value: str, argument: str) -> None:
    """Refuse, naming `argument`, a value that cannot be an id eru made (too long, characters no id has:
    eru.domain.limits.identifier), before anything is looked up (exit 2)."""
    from eru.domain.limits import identifier

    try:
        identifier(value)
    except ValueError as error:
        fail(f"{argument}: {error}", Kind.invalid_input, field=argument)


@app.command("replay")
def replay_decision(
    identifier: Annotated[str, typer.Argument(metavar="ID", help="A decision id, or the event id of a decision.")],
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    nats: NatsOption = None,
    database: DatabaseOption = None,
    output: OutputOption = Format.text,
    as_json: JsonOption = False,
) -> None:
    """Re-run a recorded allocation or eviction decision from its recorded input; exit 1 if it differs."""
    from rich.table import Table

    from eru.replay import replay
    from eru.stack.info import StackInfo

    refuse_unless_id(identifier, "ID")
    info = StackInfo.load(state_dir)
    nats_url = nats or (info.nats_url if info else None)
    dsn = database or (info.database_dsn if info else None)
    try:
        outcome = replay(run_async(find_decision(identifier, nats_url, dsn)))
    except NotRecorded as missing:
        fail(missing.message, Kind.not_found, field="ID")
    except EruError as error:
        fail_with(error)
    fmt = chosen(output, as_json)
    if fmt is not Format.text:
        fields = {"kind": outcome.kind, "same": outcome.same, "differences": outcome.differences}
        emit(document("replay", decision_id=outcome.decision_id, **fields), fmt)
    else:
        table = Table(title=f"replay of {outcome.kind} decision {outcome.decision_id}")
        table.add_column("result")
        table.add_column("differences (recorded vs replayed)", overflow="fold")
        verdict = "[green]reproduces[/]" if outcome.same else "[red]differs[/]"
        table.add_row(verdict, "\n".join(outcome.differences[:50]) or "none")
        console.print(table)
    raise typer.Exit(0 if outcome.same else 1)
