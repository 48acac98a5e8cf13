"""`eru console`: the live web console (docs/console.md); `eru console url`: a one-time login URL for it."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from eru.cli.app import app, group
from eru.cli.bus_client import BUS_URL_ENV, DEFAULT_STATE_DIR, StateDirOption
from eru.cli.output import Format, OutputOption, document, emit

console_app = group(
    "The live web console: serve it, or print a one-time login URL.", invoke_without_command=True, no_args_is_help=False
)
app.add_typer(console_app, name="console")


def _fail(message: str, code: int) -> None:
    from eru.cli.bus_client import fail

    fail(message, code)


@console_app.callback()
def console(
    ctx: typer.Context,
    bus_url: Annotated[
        str | None,
        typer.Option(
            "--bus-url",
            "--nats",
            envvar=BUS_URL_ENV,
            help="NATS URL with credentials of any stack (default: the admin URL of the stack under --state-dir).",
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to listen on (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0 = any free port).", min=0, max=65535)] = 14280,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    print_url: Annotated[bool, typer.Option("--print-url/--no-print-url", help="Print a login URL once up.")] = True,
    output: OutputOption = Format.text,
) -> None:
    """Serve the live web console against a stack until Ctrl-C and print a one-time login URL (docs/console.md)."""
    if ctx.invoked_subcommand is not None:
        return
    import asyncio

    from eru.errors import EruError
    from eru.stack.info import StackInfo

    url = bus_url
    if url is None:
        info = StackInfo.load(state_dir)
        if info is None:
            _fail(f"no stack under {state_dir}: pass --bus-url (or ERU_BUS_URL), or start one with `eru up`", 2)
            return
        url = info.nats_url

    def ready(info: object) -> None:
        from eru.console.launch import ConsoleInfo

        assert isinstance(info, ConsoleInfo)
        if output is not Format.text:  # one `eru.cli/console` document once it listens
            login = info.login_url(time.time()) if print_url else None
            emit(document("console", url=info.url, bus=info.bus, login_url=login), output)
            return
        typer.echo(f"eru console at {info.url} (bus {info.bus}); Ctrl-C stops it")
        if print_url:
            typer.echo(f"log in (once, within 10 minutes): {info.login_url(time.time())}")

    from eru.console.server import serve

    try:
        asyncio.run(serve(url, host=host, port=port, state_dir=state_dir.resolve(), on_ready=ready))
    except EruError as error:
        _fail(error.message, 3)
    except OSError as error:
        _fail(f"cannot listen on {host}:{port}: {error.strerror or error}", 3)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


@console_app.command("url")
def console_url(
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    ttl: Annotated[float, typer.Option(help="Seconds the login URL stays valid.", min=1)] = 600.0,
    output: OutputOption = Format.text,
) -> None:
    """Print a one-time login URL of the console running from STATE_DIR (like Jupyter's token URL)."""
    from eru.console.launch import running_console
    from eru.errors import EruError

    try:
        info = running_console(state_dir)
    except EruError as error:
        _fail(error.message, 3)  # no console runs there: unavailable
        return
    login = info.login_url(time.time(), ttl=ttl)
    if output is not Format.text:
        emit(document("console-url", login_url=login, ttl_seconds=ttl), output)
        return
    typer.echo(login)
