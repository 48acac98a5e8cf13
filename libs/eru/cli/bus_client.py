"""What the operation commands share: finding the stack's NATS, one connection per command, tables, errors."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
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
# The tenant the connection's credentials are bound to (a `tenant-<name>` user), None for an operator: a tenant's
# requests go to its own subjects `eru.t.<tenant>.…` (docs/security.md).
_TENANT: ContextVar[str | None] = ContextVar("eru_cli_tenant", default=None)

NatsOption = Annotated[
    str | None,
    typer.Option("--nats", envvar="ERU_BUS__URL", help="NATS URL (default: the running stack's, see --state-dir)."),
]
StateDirOption = Annotated[Path, typer.Option("--state-dir", help="State directory of a stack started by `eru up`.")]
DEFAULT_STATE_DIR = Path(".state")
TimeoutOption = Annotated[float, typer.Option("--timeout", help="Seconds to wait for an answer.")]


def nats_url(explicit: str | None, state_dir: Path) -> str:
    """The NATS URL: the option (or `ERU_BUS__URL`), else the credentials file named by `ERU_CREDENTIALS` (what
    `eru tenant credentials --out` writes), else the running stack's (stack.json), else the default local server."""
    if explicit:
        return explicit
    credentials = os.environ.get("ERU_CREDENTIALS")
    if credentials:
        try:
            return Path(credentials).read_text().strip()
        except OSError as error:
            fail(f"ERU_CREDENTIALS: cannot read {credentials}: {error.strerror or error}", code=2)
    from eru.stack import StackInfo

    info = StackInfo.load(state_dir)
    if info is not None:
        return info.nats_url
    return os.environ.get("ERU_BUS__URL", "nats://127.0.0.1:4222")


def fail(message: str, code: int = 1) -> None:
    """Print one readable line and exit with `code`."""
    from eru.redaction import redact_text

    err_console.print(f"[bold red]error:[/] {redact_text(message)}", highlight=False)
    raise typer.Exit(code)


def run_with_bus(url: str, work: Callable[[Any], Awaitable[T]]) -> T:
    """Connect, run `work(nc)`, close; an eru error becomes one line and exit code 1 (2 for invalid input)."""
    from urllib.parse import urlsplit

    from eru.bus import connect
    from eru.bus.access import tenant_of_user

    async def main() -> T:
        _TENANT.set(tenant_of_user(urlsplit(url).username))
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


def current_tenant() -> str | None:
    """The tenant of the running command's credentials (None: an operator's)."""
    return _TENANT.get()


def operation_subject(name: str) -> str:
    """Where operation `name` goes: the tenant's own subject for a tenant's client (the four verbs open to it),
    else `eru.allocator.<name>` (which a tenant's credentials may not publish: a permission error)."""
    from eru.bus.subjects import TENANT_OPERATIONS, allocator_operation, tenant_operation

    tenant = current_tenant()
    if tenant is not None and name in TENANT_OPERATIONS:
        return tenant_operation(tenant, name)
    return allocator_operation(name)


def deploy_subjects() -> tuple[str, str]:
    """(where to send a deploy request, which deploy events to follow) for the running command's credentials."""
    from eru.bus.subjects import DEPLOY_REQUEST, TENANT_PREFIX, tenant_deploy_request

    tenant = current_tenant()
    if tenant is None:
        return DEPLOY_REQUEST, "eru.deploy.*.*"
    return tenant_deploy_request(tenant), f"{TENANT_PREFIX}.{tenant}.deploy.*.*"


async def operation(nc: Any, name: str, model: BaseModel, timeout: float) -> Any:  # noqa: ASYNC109
    """Send one allocator operation and return its `OperationReply`."""
    from eru.bus import request
    from eru.domain.messages import OperationReply

    return await request(nc, operation_subject(name), model, OperationReply, timeout)


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
