"""`eru dlq ls | show ID | redrive ID|--all`: dead letters an operator can act on (docs/operations.md).

Operator verbs: they read ERU_DLQ through the JetStream API and re-publish on the original subjects, which only the
operator role may do (docs/security.md); with client credentials the server refuses and the verb says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from eru.cli.app import app, group
from eru.cli.bus_client import (
    DEFAULT_STATE_DIR,
    NatsOption,
    StateDirOption,
    console,
    err_console,
    fail,
    nats_url,
    run_with_bus,
)
from eru.cli.output import Format, JsonOption, OutputOption, chosen, document, emit

if TYPE_CHECKING:
    from nats.aio.client import Client

    from eru.bus.dead_letter_admin import DeadLetter

dlq_app = group("Dead letters: list, show and redrive messages the services gave up on (operator).", name="dlq")
app.add_typer(dlq_app)

SubjectOption = Annotated[
    str | None, typer.Option("--subject", help="Only dead letters of this original subject (glob: 'eru.deploy.*').")
]
PROGRESS_FROM = 20  # redriving at least this many shows a progress bar


async def _collect(nc: Client, subject: str | None) -> list[DeadLetter]:
    from eru.bus.dead_letter_admin import list_dead_letters

    return [letter async for letter in list_dead_letters(nc.jetstream(), subject=subject)]


def _short(text: str, limit: int = 70) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dlq_app.command("ls")
def ls(
    subject: SubjectOption = None,
    output: OutputOption = Format.text,
    as_json: JsonOption = False,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
) -> None:
    """List dead letters, oldest first: id, when, original subject, reason."""
    letters = run_with_bus(nats_url(nats, state_dir), lambda nc: _collect(nc, subject))
    fmt = chosen(output, as_json)
    if fmt is not Format.text:
        emit(document("dlq", dead_letters=[letter.summary() for letter in letters]), fmt)
        return
    from rich.table import Table

    table = Table(title=f"dead letters ({len(letters)})")
    for column in ("id", "stored at", "subject", "reason", "field", "deliveries"):
        table.add_column(column, overflow="fold")
    for letter in letters:
        when = letter.stored_at.strftime("%Y-%m-%d %H:%M:%S") if letter.stored_at else "-"
        deliveries = str(letter.deliveries) if letter.deliveries is not None else "-"
        table.add_row(str(letter.id), when, letter.subject, _short(letter.reason), letter.field or "-", deliveries)
    console.print(table)


@dlq_app.command("show")
def show(
    letter_id: Annotated[int, typer.Argument(metavar="ID", help="The dead letter's id (from `eru dlq ls`).")],
    output: OutputOption = Format.yaml,
    as_json: JsonOption = False,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
) -> None:
    """Everything about one dead letter: why, where from, its envelope and its decoded body (YAML; -o json)."""
    from eru.bus.dead_letter_admin import get_dead_letter

    letter = run_with_bus(nats_url(nats, state_dir), lambda nc: get_dead_letter(nc.jetstream(), letter_id))
    fmt = chosen(output, as_json)
    doc = document(
        "dlq-letter",
        **letter.summary(),
        stream=letter.stream,
        stream_sequence=letter.stream_sequence,
        message_type=letter.message_type,
        headers=dict(sorted(letter.headers.items())),
        body=letter.body(),
    )
    emit(doc, Format.yaml if fmt is Format.text else fmt)


@dlq_app.command("redrive")
def redrive(
    letter_id: Annotated[int | None, typer.Argument(metavar="[ID]", help="The dead letter to re-submit.")] = None,
    every: Annotated[bool, typer.Option("--all", help="Re-submit every dead letter (see --subject).")] = False,
    subject: SubjectOption = None,
    output: OutputOption = Format.text,
    as_json: JsonOption = False,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
) -> None:
    """Re-submit dead letters on their original subjects (a request is still deduplicated by its request id)."""
    if (letter_id is None) == (not every):
        fail("give one dead letter ID or --all", code=2)
    fmt = chosen(output, as_json)
    done, failed = run_with_bus(
        nats_url(nats, state_dir), lambda nc: _redrive(nc, letter_id, subject, show_progress=fmt is Format.text)
    )
    if fmt is not Format.text:
        emit(document("dlq-redrive", redriven=done, failed=failed), fmt)
    else:
        for problem in failed:
            err_console.print(f"[red]failed:[/] {problem['id']}: {problem['error']}", highlight=False)
        console.print(f"redriven {len(done)} dead letter{'s' if len(done) != 1 else ''}", highlight=False)
    if failed:
        raise typer.Exit(1)


async def _redrive(
    nc: Client, letter_id: int | None, subject: str | None, *, show_progress: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from eru.bus.dead_letter_admin import redrive as redrive_one
    from eru.errors import EruError

    js = nc.jetstream()
    ids = [letter_id] if letter_id is not None else [letter.id for letter in await _collect(nc, subject)]
    done: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []

    async def one(sequence: int) -> None:
        try:
            result = await redrive_one(js, sequence)
        except EruError as error:
            if letter_id is not None:
                raise
            failed.append({"id": sequence, "error": error.message})
            return
        done.append({"id": result.id, "subject": result.subject, "stream": result.stream, "seq": result.sequence})

    if show_progress and len(ids) >= PROGRESS_FROM:
        from rich.progress import Progress

        with Progress(console=err_console.get(), transient=True) as progress:
            task = progress.add_task("redriving", total=len(ids))
            for sequence in ids:
                await one(sequence)
                progress.advance(task)
    else:
        for sequence in ids:
            await one(sequence)
    return done, failed
