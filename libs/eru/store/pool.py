"""Connecting to PostgreSQL: one asyncpg pool per process, and a clear one-line error when the database is not there.

jsonb columns travel as JSON text (asyncpg's default): write `json.dumps(value)` with a `$n::jsonb` cast and
`json.loads` what you read. No custom codec is installed, so every module sees the same types.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from eru.errors import InvalidInput
from eru.errors import StoreUnavailable as StoreUnavailable  # raised here; callers catch it from here too

DEFAULT_CONNECT_TIMEOUT = 5.0


def redact_dsn(dsn: str) -> str:
    """The DSN without its password, fit for messages and logs."""
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "<unparseable DSN>"
    if parts.password is None:
        return dsn
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def _describe(error: BaseException) -> str:
    if isinstance(error, TimeoutError):
        return "timed out"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, socket.gaierror):
        return f"unknown host ({error.strerror or error})"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower()
    text = " ".join(str(error).split())  # one line, whatever the driver put in the message
    return text or type(error).__name__


def _unavailable(dsn: str, error: BaseException) -> StoreUnavailable:
    safe = redact_dsn(dsn)
    return StoreUnavailable(f"PostgreSQL unavailable at {safe}: {_describe(error)}", dsn=safe)


_CONNECT_ERRORS = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)


async def _connect_or_unavailable(dsn: str | None = None, **options: Any) -> asyncpg.Connection:
    """The pool's way to open a connection (asyncpg's `connect=` hook): `asyncpg.connect`, with whatever fails while
    connecting raised as `StoreUnavailable`. This is the seam where an error is known to come from reaching the
    server, so every transport's failure counts — TCP's refusal as much as a Unix socket's missing file (ENOENT),
    which anywhere else would be a bug of ours (docs/reliability.md "Transient failures")."""
    try:
        connection: asyncpg.Connection = await asyncpg.connect(dsn, **options)
    except _CONNECT_ERRORS as error:
        raise _unavailable(dsn or "", error) from error
    return connection


async def _keep_session(_conn: asyncpg.Connection) -> None:
    """The pool's reset when a connection is released: only asyncpg's own part (an open transaction rolled back,
    listener callbacks dropped), not its default query `SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *;
    RESET ALL` — one more round trip after every transaction, which the caller waits for (a deploy batch's replies,
    the next container-events batch). eru leaves no session state on a pooled connection: advisory locks are
    transaction-scoped or released before release (the migration lock in `finally`, a deploy batch's pod lock by
    `PgStore.deploy_batch`, which closes a connection whose unlock failed), settings are `SET LOCAL`, no cursor is held,
    and listeners `UNLISTEN` when they stop (asyncpg's `remove_listener`). docs/store.md "Connecting"."""


def _check_scheme(dsn: str) -> None:
    if not dsn.startswith(("postgresql://", "postgres://")):
        raise InvalidInput("dsn", f"expected a postgresql:// DSN, got {redact_dsn(dsn)!r}")


async def create_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    command_timeout: float | None = None,
) -> asyncpg.Pool:
    """An open asyncpg pool on `dsn`; `StoreUnavailable` (one line, no password) if the server cannot be reached."""
    _check_scheme(dsn)
    try:
        pool: asyncpg.Pool = await asyncio.wait_for(
            asyncpg.create_pool(
                dsn,
                min_size=min_size,
                max_size=max_size,
                timeout=connect_timeout,
                command_timeout=command_timeout,
                reset=_keep_session,
                connect=_connect_or_unavailable,
            ),
            timeout=connect_timeout + 1,
        )
    except _CONNECT_ERRORS as error:
        raise _unavailable(dsn, error) from None
    except ValueError as error:  # asyncpg rejects a malformed DSN with ValueError
        raise InvalidInput("dsn", f"{redact_dsn(dsn)}: {error}") from None
    return pool


async def connect(dsn: str, *, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT) -> asyncpg.Connection:
    """A single connection (for tools and tests); same errors as `create_pool`."""
    _check_scheme(dsn)
    try:
        connection: asyncpg.Connection = await asyncio.wait_for(
            asyncpg.connect(dsn, timeout=connect_timeout), connect_timeout + 1
        )
    except _CONNECT_ERRORS as error:
        raise _unavailable(dsn, error) from None
    except ValueError as error:
        raise InvalidInput("dsn", f"{redact_dsn(dsn)}: {error}") from None
    return connection


async def check_database(dsn: str, timeout: float = DEFAULT_CONNECT_TIMEOUT) -> str:  # noqa: ASYNC109 (connect timeout)
    """Connect once and return the server version (e.g. "18.1"); `StoreUnavailable` when unreachable."""
    connection = await connect(dsn, connect_timeout=timeout)
    try:
        version = connection.get_server_version()
    finally:
        await connection.close()
    return f"{version.major}.{version.minor}"
