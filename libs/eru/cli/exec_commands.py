"""`eru container logs ID [-f] [--tail N]` and `eru exec ID -- CMD ARGS…`: a container's own output and a command
run inside it, streamed from its node (docs/cli.md, docs/node-agent.md "Logs and exec")."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from eru.cli.app import app
from eru.cli.bus_client import (
    DEFAULT_STATE_DIR,
    NatsOption,
    StateDirOption,
    TimeoutOption,
    console,
    fail,
    fail_with,
    nats_url,
    run_async,
    with_bus,
)
from eru.cli.container_commands import container_app
from eru.cli.output import Format, OutputOption, document, emit

CONTAINER_ARGUMENT = "CONTAINER_ID"


def check_command(command: list[str], option: str = "CMD") -> list[str]:
    """`command` within the documented limits (eru.domain.limits: at most 256 arguments, 32 KiB each, 64 KiB in
    all), else one line naming `option` and the rule (exit 2)."""
    from pydantic import TypeAdapter, ValidationError

    from eru.domain.limits import Arguments

    if not command:
        fail(f"{option}: give the command after `--` (eru exec ID -- CMD ARGS…)", code=2, field=option)
    try:
        return TypeAdapter(Arguments).validate_python(command)
    except ValidationError as error:
        reason = error.errors()[0]["msg"].removeprefix("Value error, ")
        fail(f"{option}: {reason}", code=2, field=option)


def check_container(container_id: str) -> None:
    """A container id the bus can carry (at most 128 characters), else one line naming it (exit 2)."""
    from eru.bounded import clip

    if not container_id or len(container_id) > 128:
        fail(f"{CONTAINER_ARGUMENT}: {clip(container_id)!r} is not a container id (1 to 128 characters)", code=2)


def stream(url: str, container_id: str, action: str, fmt: Format, **options: Any) -> Any:
    """Run one session: printed as it comes (text) or collected for the document; an eru error ends the verb."""
    from eru.cli.attach_client import attach, write_through
    from eru.errors import EruError

    sink = write_through if fmt is Format.text else None
    try:
        return run_async(with_bus(url, lambda nc: attach(nc, container_id, action, sink=sink, **options)))
    except EruError as error:
        fail_with(error)


def session_document(schema: str, session: Any) -> dict[str, Any]:
    """The `eru.cli/container-logs` or `eru.cli/exec` document: the output by stream, the exit code."""
    return document(
        schema,
        container_id=session.container_id,
        node=session.node,
        stdout="".join(text for stream, text in session.output if stream == "stdout"),
        stderr="".join(text for stream, text in session.output if stream == "stderr"),
        exit_code=session.exit_code,
        error=session.error,
        lost_chunks=session.lost,
    )


def ended_badly(session: Any) -> None:
    """A stream that broke (the agent's error) or lost chunks: say so on stderr; a broken one fails (exit 3)."""
    if session.lost:
        console.use_stderr()
        console.print(f"[yellow]warning:[/] {session.lost} chunks of output were lost on the way (a slow client)")
    if session.error is not None:
        fail(f"the stream from node {session.node} broke: {session.error}", code=3)


@container_app.command("logs")
def container_logs(
    container_id: Annotated[str, typer.Argument(metavar=CONTAINER_ARGUMENT)],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing until the container stops.")] = False,
    tail: Annotated[int | None, typer.Option(help="Only the last N lines.", min=0, max=100_000)] = None,
    output: OutputOption = Format.text,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 10.0,
) -> None:
    """The container's own stdout/stderr from its node; -f follows it (a tenant: only its own containers)."""
    check_container(container_id)
    url = nats_url(nats, state_dir)
    session = stream(url, container_id, "logs", output, follow=follow, tail=tail, timeout=timeout)
    if output is not Format.text:
        emit(session_document("container-logs", session), output)
    ended_badly(session)


@app.command(
    "exec",
    help="Run a command inside a container; exit with its code.",
)
def exec_(
    container_id: Annotated[str, typer.Argument(metavar=CONTAINER_ARGUMENT)],
    command: Annotated[list[str], typer.Argument(metavar="CMD", help="After `--`: the command and its arguments.")],
    output: OutputOption = Format.text,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 10.0,
) -> None:
    """Run CMD inside the running container (on its node), print its output, exit with its exit code."""
    check_container(container_id)
    args = check_command(list(command))
    url = nats_url(nats, state_dir)
    session = stream(url, container_id, "exec", output, command=args, timeout=timeout)
    if output is not Format.text:
        emit(session_document("exec", session), output)
    ended_badly(session)
    raise typer.Exit(session.exit_code or 0)
