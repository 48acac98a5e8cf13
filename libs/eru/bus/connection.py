"""Connecting to NATS: bounded at start (one clear `BusUnavailable` line naming the URL), reconnecting after."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import nats.errors
import structlog
from nats.aio.client import Client

from eru.bus.errors import BusUnavailable
from eru.errors import InvalidInput

log = structlog.get_logger()
_PERMISSIONS_VIOLATION = "permissions violation"


class EruClient(Client):
    """nats-py's client, remembering the permission violations the server reported (`-ERR 'Permissions
    Violation …'`): the server drops a denied message silently, so a request checks this list instead of waiting
    out its timeout (`eru.bus.requests.request`)."""

    def __init__(self) -> None:
        super().__init__()
        self.violations: list[str] = []


def violations_since(nc: Client, mark: int, subjects: tuple[str, ...]) -> str | None:
    """The first permission violation reported on `nc` after the first `mark` ones that names one of `subjects`
    (nats-py lowercases the server's message, subjects included)."""
    for violation in list(getattr(nc, "violations", []))[mark:]:
        if any(f'"{subject.lower()}"' in str(violation).lower() for subject in subjects):
            return str(violation)
    return None


def split_urls(url: str) -> list[str]:
    """The servers of a `bus.url`: one URL, or several separated by commas (the servers of one cluster, each with
    the same credentials: docs/deploy.md "The NATS cluster")."""
    return [part.strip() for part in url.split(",") if part.strip()]


def default_inbox_prefix(url: str) -> str:
    """`_INBOX_<user>` for a URL with a user (every user of docs/security.md may read only that prefix), else
    nats-py's `_INBOX`."""
    servers = split_urls(url)
    user = urlsplit(servers[0]).username if servers else None
    return f"_INBOX_{user}" if user else "_INBOX"


def redact(url: str) -> str:
    """The URL (or comma-separated URLs) without a password, fit for logs and error messages."""
    if "," in url:
        return ",".join(redact(part) for part in split_urls(url))
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def tls_context(ca_file: Path | None, cert_file: Path | None = None, key_file: Path | None = None) -> ssl.SSLContext:
    """A client TLS context trusting `ca_file` (else the system's roots), with a client certificate when given.

    An unreadable or malformed file is `InvalidInput` naming the setting (`bus.tls_ca_file` …)."""
    if (cert_file is None) != (key_file is None):
        raise InvalidInput("bus.tls_cert_file", "a client certificate needs its key (bus.tls_key_file) and vice versa")
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    try:
        if ca_file is not None:
            context.load_verify_locations(cafile=str(ca_file))
    except (OSError, ssl.SSLError) as error:
        raise InvalidInput("bus.tls_ca_file", f"cannot use {ca_file}: {describe(error)}") from None
    try:
        if cert_file is not None and key_file is not None:
            context.load_cert_chain(str(cert_file), str(key_file))
    except (OSError, ssl.SSLError) as error:
        raise InvalidInput("bus.tls_cert_file", f"cannot use {cert_file} with {key_file}: {describe(error)}") from None
    return context


def describe(error: BaseException) -> str:
    """One line for an exception: its message, or its class name when it has none."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return text or type(error).__name__


async def connect(
    url: str,
    name: str,
    *,
    connect_timeout: float = 5.0,
    reconnect_time_wait: float = 1.0,
    max_reconnect_attempts: int = -1,
    **options: Any,
) -> Client:
    """A connected NATS client labelled `name`.

    The first connection must succeed within `connect_timeout` seconds (retrying a server that is still starting),
    or `BusUnavailable` is raised with the URL and the last reason. After that the client reconnects on its own,
    forever by default, and logs disconnects and reconnects as one line each.
    """
    shown = redact(url)
    client = EruClient()
    servers = split_urls(url)
    options.setdefault("inbox_prefix", default_inbox_prefix(url))
    first = urlsplit(servers[0]) if servers else None
    if len(servers) > 1 and first is not None and first.username and first.password is not None:
        # servers learnt from a cluster's INFO (connect_urls) carry no credentials: the same user signs in there too
        options.setdefault("user", first.username)
        options.setdefault("password", first.password)
    connected = False
    last_error: list[str] = []
    refused_credentials = asyncio.Event()

    async def on_error(error: Exception) -> None:
        if connected:
            if _PERMISSIONS_VIOLATION in str(error).lower():
                client.violations.append(str(error))
                del client.violations[:-100]  # the recent ones are all a request looks at
                # a request raises PermissionDenied for it; a service's log still shows it
                log.info("bus.permission_denied", url=shown, error=describe(error))
                return
            log.warning("bus.error", url=shown, error=describe(error))
        else:
            if refused_credentials.is_set():
                return  # the server's own reason stays, not the reset of the connection it then closed
            last_error[:] = ["connection refused" if isinstance(error, ConnectionRefusedError) else describe(error)]
            # Retrying cannot fix wrong credentials: give up at once instead of waiting out the timeout.
            # (nats-py hands the server's -ERR over as a plain Error, so the text is what tells.)
            if isinstance(error, nats.errors.AuthorizationError) or "authorization" in str(error).lower():
                refused_credentials.set()

    async def on_disconnected() -> None:
        # A disconnect we asked for (close or drain) is not news; an unexpected one is.
        if connected and not (client.is_closed or client.is_draining):
            log.warning("bus.disconnected", url=shown)

    async def on_reconnected() -> None:
        log.info("bus.reconnected", url=shown)

    async def on_closed() -> None:
        if connected:
            log.info("bus.closed", url=shown)

    # nats-py annotates these as int but takes fractions of a second.
    timing: dict[str, Any] = {
        "connect_timeout": max(0.2, min(connect_timeout, 2.0)),
        "reconnect_time_wait": reconnect_time_wait,
    }
    connecting = asyncio.ensure_future(
        client.connect(
            servers=servers or [url],
            name=name,
            allow_reconnect=True,
            max_reconnect_attempts=max_reconnect_attempts,
            error_cb=on_error,
            disconnected_cb=on_disconnected,
            reconnected_cb=on_reconnected,
            closed_cb=on_closed,
            **timing,
            **options,
        )
    )
    refused = asyncio.ensure_future(refused_credentials.wait())
    try:
        await asyncio.wait({connecting, refused}, timeout=connect_timeout, return_when=asyncio.FIRST_COMPLETED)
        if not connecting.done():
            connecting.cancel()
            await asyncio.gather(connecting, return_exceptions=True)
            raise TimeoutError
        connecting.result()
    except Exception as error:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.close(), timeout=1.0)
        reason = last_error[0] if last_error else describe(error)
        if isinstance(error, TimeoutError) and not last_error:
            reason = "no answer"
        if refused_credentials.is_set():
            message = f"NATS at {shown} refused the connection: {reason} (check the credentials in the URL)"
        else:
            message = f"cannot reach NATS at {shown} within {connect_timeout:g}s: {reason}"
        raise BusUnavailable(message, url=shown, reason=reason) from None
    finally:
        refused.cancel()
    connected = True
    log.debug("bus.connected", url=shown, name=name)
    return client


async def settle(nc: Client, timeout: int = 5) -> None:  # noqa: ASYNC109 - forwarded to each flush (seconds)
    """Return once the server has processed everything sent on `nc` so far, subscriptions included.

    One `flush()` is not enough: nats-py (2.16) writes its PING straight to the socket, ahead of commands its
    flusher task has not written yet, so the PONG can come back before a new SUB reached the server, and a message
    published by another client right then is not delivered (seen under load: the eviction service missed the first
    sample after declaring itself ready). The first round trip lets the flusher write what was queued; the second
    PING goes after it.
    """
    await nc.flush(timeout=timeout)
    await nc.flush(timeout=timeout)
