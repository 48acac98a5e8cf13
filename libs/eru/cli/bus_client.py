"""What the operation commands share: finding the stack's NATS, one connection per command, tables, errors.

Kept cheap to import (docs/cli.md, "Fast start"): nats, pydantic, rich and the services are imported inside the
functions that need them, so `eru --help` does not pay for them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

from eru.cli.failure import CliError, Kind, as_typed, format_in_context, kind_of_exit, report, typed_as
from eru.errors import EruError

if TYPE_CHECKING:
    from nats.aio.client import Client
    from pydantic import BaseModel
    from rich.console import Console

T = TypeVar("T")
# The tenant the connection's credentials are bound to (a `tenant-<name>` user), None for an operator: a tenant's
# requests go to its own subjects `eru.t.<tenant>.…` (docs/security.md).
_TENANT: ContextVar[str | None] = ContextVar("eru_cli_tenant", default=None)


class LazyConsole:
    """A rich `Console` built on first use (rich costs ~40 ms to import; `eru --help` should not pay for it)."""

    def __init__(self, stderr: bool = False) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    def get(self) -> Console:
        """The real console."""
        if self._console is None:
            from eru.cli.consoles import make_console

            # not a terminal (a file, a pipe, CI logs): nothing wrapped or cut (eru.cli.consoles)
            self._console = make_console(stderr=self._stderr)
        return self._console

    def use_stderr(self) -> None:
        """Print on stderr from now on: a verb asked for -o json|yaml keeps stdout for its document."""
        self._stderr, self._console = True, None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.get(), name)


console: Any = LazyConsole()
err_console: Any = LazyConsole(stderr=True)

# Environment variables of the options every operation verb shares (docs/cli.md, "Environment").
BUS_URL_ENV = ["ERU_BUS_URL", "ERU_BUS__URL"]
STATE_DIR_ENV = "ERU_STATE_DIR"
DATABASE_ENV = ["ERU_DATABASE_URL", "ERU_STORE__DSN"]

NatsOption = Annotated[
    str | None,
    typer.Option(
        "--nats",
        "--bus-url",
        envvar=BUS_URL_ENV,
        help="NATS URL with credentials (nats://user:password@host:4222) of any stack; default: the stack under "
        "--state-dir.",
    ),
]
DEFAULT_STATE_DIR = Path(".state")
StateDirOption = Annotated[
    Path, typer.Option("--state-dir", envvar=STATE_DIR_ENV, help="State directory of a stack started by `eru up`.")
]
DatabaseOption = Annotated[
    str | None,
    typer.Option("--database", envvar=DATABASE_ENV, help="PostgreSQL DSN (default: the stack's, see --state-dir)."),
]
TimeoutOption = Annotated[float, typer.Option("--timeout", envvar="ERU_TIMEOUT", help="Seconds to wait for an answer.")]


def nats_url(explicit: str | None, state_dir: Path) -> str:
    """The NATS URL: the option (or ERU_BUS_URL), else the credentials file named by `ERU_CREDENTIALS` (what
    `eru tenant credentials --out` writes), else the stack's under `state_dir` (stack.json)."""
    if explicit:
        return explicit
    credentials = os.environ.get("ERU_CREDENTIALS")
    if credentials:
        try:
            return Path(credentials).read_text().strip()
        except OSError as error:
            fail(f"ERU_CREDENTIALS: cannot read {credentials}: {error.strerror or error}", code=2)
    from eru.stack.info import StackInfo

    info = StackInfo.load(state_dir)
    if info is None:
        fail(f"no stack under {state_dir}: start one with `eru up`, or give --nats / ERU_BUS_URL", code=2)
    return info.nats_url


def fail(message: str, code: int | Kind = Kind.refused, *, field: str | None = None, **details: Any) -> NoReturn:
    """End the verb with one failure (docs/cli.md, "Exit codes"): `code` is its kind, or the exit code of one; with
    `-o json|yaml` the `eru.cli/error` document on stdout, else one line on stderr (text, never markup, never wrapped;
    no password of a URL or DSN in it)."""
    kind = code if isinstance(code, Kind) else kind_of_exit(code)
    fail_with(CliError(kind, message, field=field, **details))


def fail_with(error: BaseException) -> NoReturn:
    """End the verb with `error` (an eru error by its code, anything else as internal), reported as `fail` does."""
    raise typer.Exit(report(CliError.of(error), format_in_context()))


def refuse_invalid(error: Any, options: dict[str, str]) -> NoReturn:
    """A request the user's options make invalid (a pydantic `ValidationError` or an `InvalidInput`): one line naming
    the option the user typed, mapped from the field path (`workload.image` → `--image`, the longest mapped prefix
    wins; eru.cli.failure.typed_as), and exit 2."""
    typed_as(options)
    fail_with(error)


def as_option(error: EruError, options: dict[str, str]) -> str:
    """An error's message with the field it names (`node_filter.labels: …`) put as the option the user typed
    (`--node-label: …`; eru.cli.failure.as_typed); the message itself when no option maps."""
    field = getattr(error, "field", None) or error.details.get("field")
    return as_typed(error.message, field if isinstance(field, str) else None, options)[0]


def refuse_nothing(option: str, value: float) -> None:
    """A request that would do nothing (`--count 0`) is refused with one line naming the option (exit 2)."""
    if value <= 0:
        fail(f"{option} must be at least 1 (got {value:g}): the request would do nothing", code=2)


def run_async(work: Awaitable[T]) -> T:
    """`asyncio.run(work)`; Ctrl-C cancels it cleanly and reaches `main` as a KeyboardInterrupt (exit 130)."""
    import asyncio

    quiet_logging()
    try:
        return asyncio.run(_quiet(work))
    except Exception as error:
        errors = sys.modules.get("nats.errors")  # imported already when a message was sent
        if errors is not None and isinstance(error, errors.MaxPayloadError):
            # eru's requests name the field that made a message too big (eru.bus.codec.check_payload); any other
            # publish gets this one line, never nats-py's traceback
            fail(f'message: too large for the bus ({error}): see docs/cli.md "Limits"', code=2)
        raise


def quiet_logging() -> None:
    """structlog for a CLI process (once): warnings and errors only, unless ERU_LOG_LEVEL asks for more."""
    global _LOGGING_DONE
    if _LOGGING_DONE:
        return
    from eru.logging import configure_logging

    configure_logging("cli", "cli", log_format="console", level=os.environ.get("ERU_LOG_LEVEL", "warning"))
    _LOGGING_DONE = True


_LOGGING_DONE = False


async def _quiet(work: Awaitable[T]) -> T:
    import asyncio

    # A library task still running when Ctrl-C cancels everything (nats' flusher/reader) may end with an error that
    # asyncio would print as a traceback at shutdown; an interrupted CLI has nothing to add to that.
    asyncio.get_running_loop().set_exception_handler(lambda _loop, _context: None)
    return await work


async def with_bus(url: str, work: Callable[[Any], Awaitable[T]]) -> T:
    """Connect, run `work(nc)`, close (errors propagate)."""
    from urllib.parse import urlsplit

    from eru.bus import connect
    from eru.bus.access import tenant_of_user
    from eru.bus.connection import split_urls

    first = (split_urls(url) or [url])[0]  # a cluster's servers all carry the same user
    _TENANT.set(tenant_of_user(urlsplit(first).username))
    nc = await connect(url, name="eru-cli", connect_timeout=3)
    try:
        return await work(nc)
    finally:
        await nc.close()


def run_with_bus(url: str, work: Callable[[Any], Awaitable[T]], options: dict[str, str] | None = None) -> T:
    """Connect, run `work(nc)`, close; an eru error ends the verb with the exit code of its kind (`fail_with`), the
    field it names put as its option when `options` maps it (`as_option`)."""
    if options is not None:
        typed_as(options)
    try:
        return run_async(with_bus(url, work))
    except EruError as error:
        fail_with(error)  # named as typed (eru.cli.failure.typed_as)


def current_tenant() -> str | None:
    """The tenant of the running command's credentials (None: an operator's)."""
    return _TENANT.get()


def operation_subject(name: str) -> str:
    """Where operation `name` goes: the tenant's own subject for a tenant's client (the four verbs open to it),
    else `eru.allocator.<name>` (which a tenant's credentials may not publish: a permission error)."""
    from eru.bus.subjects import TENANT_OPERATIONS, TENANT_STREAM_OPERATIONS, allocator_operation, tenant_operation

    tenant = current_tenant()
    if tenant is not None and name in (*TENANT_OPERATIONS, *TENANT_STREAM_OPERATIONS):
        return tenant_operation(tenant, name)
    return allocator_operation(name)


def deploy_subjects() -> tuple[str, str]:
    """(where to send a deploy request, which deploy events to follow) for the running command's credentials."""
    from eru.bus.subjects import DEPLOY_REQUEST, TENANT_PREFIX, tenant_deploy_request

    tenant = current_tenant()
    if tenant is None:
        return DEPLOY_REQUEST, "eru.deploy.*.*"
    return tenant_deploy_request(tenant), f"{TENANT_PREFIX}.{tenant}.deploy.*.*"


async def operation(nc: Client, name: str, model: BaseModel, timeout: float) -> Any:  # noqa: ASYNC109
    """Send one allocator operation and return its `OperationReply`."""
    from eru.bus import request
    from eru.domain.messages import OperationReply

    return await request(nc, operation_subject(name), model, OperationReply, timeout)


PROGRESS_AFTER_PAGES = 2  # a listing that needs more pages than this shows a progress line on stderr while it reads


async def all_pages(
    nc: Client,
    name: str,
    request: Any,
    page_timeout: float,
    *,
    progress: bool | None = None,
    max_rows: int | None = None,
) -> Any:
    """Every page of the paged operation `name` (`query`, `tenant-ls`, `tenant-reservations`), as one
    `OperationReply`: rows concatenated (a deploy's containers merged into its one row), message and warnings of the
    first page (docs/bus.md, paging). From the third page on, a transient progress line on stderr counts the rows
    read (`progress`: None = only on a terminal). `page_timeout` bounds each page's request; with `max_rows`,
    reading stops once that many rows are in."""
    first = await operation(nc, name, request, page_timeout)
    rows = [dict(row) for row in first.rows]
    cursor = first.next_cursor
    pages = 1
    status: Any = None
    show = err_console.get().is_terminal if progress is None else progress
    try:
        while cursor is not None and (max_rows is None or len(rows) < max_rows):
            page = await operation(nc, name, request.model_copy(update={"cursor": cursor}), page_timeout)
            pages += 1
            if getattr(request, "what", None) == "deploy" and rows and page.rows:
                rows[0]["containers"] = [*rows[0]["containers"], *page.rows[0]["containers"]]
            else:
                rows.extend(page.rows)
            cursor = page.next_cursor
            if show and cursor is not None and pages >= PROGRESS_AFTER_PAGES:
                text = f"reading {name}: {len(rows):,} rows, page {pages + 1} …"
                if status is None:
                    status = err_console.get().status(text)
                    status.start()
                else:
                    status.update(text)
    finally:
        if status is not None:
            status.stop()
    if max_rows is not None:
        rows = rows[:max_rows]
    return first.model_copy(update={"rows": rows, "next_cursor": None})


async def query_all(nc: Client, request: Any, timeout: float) -> Any:  # noqa: ASYNC109 - per page, as `operation`
    """Every page of a list query (`QueryRequest`), as one `OperationReply` (see `all_pages`)."""
    return await all_pages(nc, "query", request, timeout)


def cores(pieces: int | float, share_base: int = 100) -> str:
    """Pieces as cores for display (`150` → `1.5`)."""
    value = pieces / share_base
    return f"{value:g}"


def number(value: Any) -> str:
    """A counter for display: integral values without a decimal point (`3.0` → `3`), others as `%g`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def cpuset(cpu_map: dict[str, Any]) -> str:
    """A core → pieces map as `0 1 2:50` (whole cores bare, fragments with their pieces; docs/cli.md)."""
    from eru.planning.resources import id_sort_key

    key = id_sort_key(cpu_map)
    parts = []
    for core in sorted(cpu_map, key=key):
        pieces = int(cpu_map[core])
        parts.append(core if pieces == 100 else f"{core}:{pieces}")
    return " ".join(parts) or "-"
