"""A real nats-server enforcing eru's generated accounts (`eru.bus.access`), and raw clients of those accounts that
record the permission errors the server sends them: what the access tests of the bus and the node agent share
(docs/security.md).

`secured_nats_server(accounts, directory)` writes the server config for `accounts` and runs the server until the
block ends; `account_clients(server, accounts)` yields `connect(name)`, which opens a plain nats-py client (no
reconnect, the account's inbox prefix) as `accounts[name]` and closes every client it opened at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from pathlib import Path

import nats
from nats.aio.client import Client

from eru.bus.access import Account, render_server_config
from eru.embedded.nats_server import NatsServer


@contextlib.contextmanager
def secured_nats_server(accounts: Iterable[Account], directory: Path) -> Iterator[NatsServer]:
    """A running nats-server whose users are `accounts` (config and store under `directory`)."""
    config = directory / "nats.conf"
    config.write_text(render_server_config(list(accounts)))
    server = NatsServer(store_dir=directory / "nats", config_file=config)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class AccountClient:
    """A raw nats-py client of one account that records the permission errors the server sends it."""

    def __init__(self, nc: Client, errors: list[str]) -> None:
        self.nc = nc
        self.errors = errors

    async def denied(self, fragment: str, within: float = 2.5) -> bool:
        """True once the server reported a permissions violation naming `fragment` (waits up to `within` s)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            if any("permissions violation" in e.lower() and fragment.lower() in e.lower() for e in self.errors):
                return True
            if loop.time() > deadline:
                return False
            await asyncio.sleep(0.05)


Connect = Callable[[str], Awaitable[AccountClient]]


@contextlib.asynccontextmanager
async def account_clients(server: NatsServer, accounts: Mapping[str, Account]) -> AsyncIterator[Connect]:
    """`connect(name)`: a client of `accounts[name]` on `server`; every one opened is closed at the end."""
    opened: list[Client] = []

    async def connect(name: str) -> AccountClient:
        account = accounts[name]
        errors: list[str] = []

        async def on_error(error: Exception) -> None:
            errors.append(str(error))

        nc = await nats.connect(
            account.url(server.url), inbox_prefix=account.inbox_prefix, error_cb=on_error, allow_reconnect=False
        )
        opened.append(nc)
        return AccountClient(nc, errors)

    try:
        yield connect
    finally:
        for nc in opened:
            await nc.close()
