"""`eru tenant credentials NAME`: a tenant's client credentials on the embedded stack (docs/security.md).

The credentials are a NATS URL with the tenant's user (`tenant-<name>`) and password: printed, or written to a file
readable by its owner only (0600) that the CLI reads through `ERU_CREDENTIALS=FILE`. Whoever holds them can deploy,
remove, realloc, replace and query for that tenant only.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from eru.cli.bus_client import DEFAULT_STATE_DIR, StateDirOption, console, fail, fail_with, run_async
from eru.cli.output import Format, OutputOption, document, emit
from eru.cli.tenant_commands import tenant_app

OutOption = Annotated[
    Path | None, typer.Option("--out", help="Write the credentials to this file (0600) instead of printing the URL.")
]


def issue(name: str, state_dir: Path, *, rotate: bool, out: Path | None, fmt: Format = Format.text) -> dict[str, str]:
    """Issue (or show) `name`'s client credentials on the stack under `state_dir`, print or write them (with `fmt`
    json or yaml: print nothing, return the `eru.cli/tenant-credentials` fields: `url`, or `file` and the redacted
    `url` once written)."""
    from eru.bus.access import client_user
    from eru.bus.connection import redact
    from eru.errors import EruError
    from eru.stack.auth import issue_tenant_credentials, write_private
    from eru.stack.info import StackInfo

    info = StackInfo.load(state_dir)
    if info is None or not info.supervisor_alive():
        fail(f"no running stack under {state_dir}: tenant credentials are issued by the stack's NATS server", code=3)
        return
    if not info.embedded_nats:
        fail("the stack uses an external NATS server: add the tenant's user to its configuration (docs/security.md)")
        return
    try:
        client_user(name)
        # every nats-server of the stack (`nats-server`, or a cluster's `nats-<i>`) reloads the users
        servers = [pid for server, pid in info.server_pids.items() if server.startswith("nats-")]
        account = issue_tenant_credentials(state_dir, name, rotate=rotate, server_pids=servers)
    except EruError as error:
        fail_with(error)
    url = account.url(info.nats_url)
    _wait_accepted(url)
    if out is None:
        if fmt is Format.text:
            console.print(url, highlight=False, soft_wrap=True)
        return {"tenant": name, "url": url}
    write_private(out, url + "\n")
    if fmt is not Format.text:
        return {"tenant": name, "url": redact(url), "file": str(out)}
    console.print(f"wrote the credentials of tenant {name} ({redact(url)}) to {out} (mode 0600)", highlight=False)
    console.print(f"use them with: ERU_CREDENTIALS={out} eru deploy …", highlight=False)
    return {"tenant": name, "url": redact(url), "file": str(out)}


def _wait_accepted(url: str, seconds: float = 10.0) -> None:
    """Return once the server accepts the new credentials (a reload takes effect a moment after the SIGHUP)."""
    from eru.bus.connection import connect
    from eru.errors import EruError

    async def probe() -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while True:
            try:
                nc = await connect(url, name="eru-credentials-check", connect_timeout=2)
            except EruError:
                if loop.time() >= deadline:
                    raise
                await asyncio.sleep(0.1)
                continue
            await nc.close()
            return

    try:
        run_async(probe())
    except EruError as error:
        fail(f"the NATS server did not take the new credentials: {error.message}", code=3)


@tenant_app.command("credentials")
def tenant_credentials(
    name: str,
    out: OutOption = None,
    rotate: Annotated[bool, typer.Option(help="Issue a new password; the old one stops working.")] = False,
    output: OutputOption = Format.text,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
) -> None:
    """Print (or write with --out) the client credentials of tenant NAME: a NATS URL bound to that tenant."""
    issued = issue(name, state_dir.resolve(), rotate=rotate, out=out, fmt=output)
    if output is not Format.text:
        emit(document("tenant-credentials", **issued), output)
