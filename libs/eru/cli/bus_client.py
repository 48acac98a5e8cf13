"""What the operation commands share: finding the stack's NATS, one connection per command, tables, errors."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import BaseModel
from rich.console import Console

from eru.errors import EruError

# Not a terminal (make demo | tee, CI logs): wide enough for full container ids instead of wrapped cells.
console = Console() if sys.stdout.isatty() else Console(width=170)
err_console = Console(stderr=True)
T = TypeVar("T")

NatsOption = Annotated[
    str | None,
    typer.Option("--nats", envvar="ERU_BUS__URL", help="NATS URL (default: the running stack's, see --state-dir)."),
]
StateDirOption = Annotated[Path, typer.Option("--state-dir", help="State directory of a stack started by `eru up`.")]
DEFAULT_STATE_DIR = Path(".state")
TimeoutOption = Annotated[float, typer.Option("--timeout", help="Seconds to wait for an answer.")]


def nats_url(explicit: str | None, state_dir: Path) -> str:
    """The NATS URL: the option, else the running stack's (stack.json), else the default local server."""
    if explicit:
        return explicit
    from eru.stack import StackInfo

    info = StackInfo.load(state_dir)
    if info is not None:
        return info.nats_url
    return os.environ.get("ERU_BUS__URL", "nats://127.0.0.1:4222")


def fail(message: str, code: int = 1) -> None:
    """Print one readable line and exit with `code`."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def run_with_bus(url: str, work: Callable[[Any], Awaitable[T]]) -> T:
    """Connect, run `work(nc)`, close; an eru error becomes one line and exit code 1 (2 for invalid input)."""
    from eru.bus import connect

    async def main() -> T:
        nc = await connect(url, name="eru-cli", connect_timeout=3)
        try:
            return await work(nc)
        finally:
            await nc.close()

    try:
        return asyncio.run(main())
    except EruError as error:
        fail(error.message, code=2 if error.code == "invalid_input" else 1)
        raise  # unreachable: fail exits


async def operation(nc: Any, name: str, model: BaseModel, timeout: float) -> Any:  # noqa: ASYNC109
    """Send one allocator operation and return its `OperationReply`."""
    from eru.bus import request
    from eru.bus.subjects import allocator_operation
    from eru.domain.messages import OperationReply

    return await request(nc, allocator_operation(name), model, OperationReply, timeout)


async def query_all(nc: Any, request: Any, timeout: float) -> Any:  # noqa: ASYNC109 - per page, as `operation`
    """Every page of a list query (`QueryRequest`), as one `OperationReply`: rows concatenated, a deploy's containers
    merged into its one row (docs/bus.md, paging)."""
    first = await operation(nc, "query", request, timeout)
    rows = [dict(row) for row in first.rows]
    cursor = first.next_cursor
    while cursor is not None:
        page = await operation(nc, "query", request.model_copy(update={"cursor": cursor}), timeout)
        if request.what == "deploy" and rows and page.rows:
            rows[0]["containers"] = [*rows[0]["containers"], *page.rows[0]["containers"]]
        else:
            rows.extend(page.rows)
        cursor = page.next_cursor
    return first.model_copy(update={"rows": rows, "next_cursor": None})


def cores(pieces: int | float, share_base: int = 100) -> str:
    """Pieces as cores for display (`150` → `1.5`)."""
    value = pieces / share_base
    return f"{value:g}"


def cpuset(cpu_map: dict[str, Any]) -> str:
    """A core → pieces map as `0 1 2:50` (whole cores bare, fragments with their pieces)."""
    from eru.planning.resources import id_sort_key

    key = id_sort_key(cpu_map)
    parts = []
    for core in sorted(cpu_map, key=key):
        pieces = int(cpu_map[core])
        parts.append(core if pieces == 100 else f"{core}:{pieces}")
    return " ".join(parts) or "-"
