"""Store outages are transient (docs/store.md "Outages"): connection loss, refusal and timeouts are retried with
exponential backoff until a deadline (`ERU_STORE_RETRY_SECONDS`, default 120 s); only then does a request fail, with
`store_unavailable`.

The retry loop is tenacity's `AsyncRetrying` (a well-kept library: jittered exponential waits, a stop on elapsed time
and a hook before each sleep, which the consumer uses to keep the message in progress).

It belongs to neither the bus nor the store: the bus's consumers and requests retry by it, and the failures it
judges come from both (docs/architecture.md "Package dependencies").
"""

from __future__ import annotations

import asyncio
import errno
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg
import nats.errors
import nats.js.errors
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_delay, wait_exponential_jitter

from eru.errors import EruError, StoreUnavailable

T = TypeVar("T")

# "The server cannot be reached", whatever the transport (TCP, a Unix socket): judged by what a failure means, not
# by a list of exception classes that each new transport slips past (docs/reliability.md "Transient failures").
# Failures raised while *connecting* are turned into `StoreUnavailable` at the pool's seam (eru.store.pool), whatever
# the OSError (ENOENT when the socket file is gone, EACCES, a name that does not resolve); elsewhere these errnos mean
# a peer refused, vanished or timed out — none of them is what a missing file of our own raises.
UNREACHABLE_ERRNOS = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EHOSTUNREACH,
        errno.EHOSTDOWN,
        errno.ENETUNREACH,
        errno.ENETDOWN,
        errno.ENETRESET,
        errno.EPIPE,
        errno.ETIMEDOUT,
        errno.ENOTCONN,
        errno.ESHUTDOWN,
    }
)
# PostgreSQL's SQLSTATEs for the same: class 08 (connection exception), 57P01 admin_shutdown, 57P02 crash_shutdown,
# 57P03 cannot_connect_now (starting or stopping), 53300 too_many_connections.
UNREACHABLE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "53300"})
# A concurrency conflict that a rerun resolves: 40001 serialization_failure, 40P01 deadlock_detected.
RERUN_SQLSTATES = frozenset({"40001", "40P01"})
# The bus's own transient failures (a NATS timeout, no responder yet, a lost connection) by error code.
_TRANSIENT_CODES = frozenset({"store_unavailable", "bus_unavailable", "timeout", "no_responders"})
# nats-py's, raised by a JetStream publish while a clustered stream elects a new leader (its server died: no
# responder, or 503 "JetStream system temporarily unavailable") or while the client reconnects to another server.
# Found by the compose failover test (docs/deploy.md): a node agent's result publish failing so was dead-lettered as
# a handler bug, and its deploy ended "no answer from node" 120 s later.
_TRANSIENT_NATS: tuple[type[BaseException], ...] = (
    nats.errors.NoRespondersError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.errors.OutboundBufferLimitError,
)


def cannot_reach_server(error: BaseException) -> bool:
    """True when `error` means the server cannot be reached or went away, over TCP or a Unix socket: the pool could
    not connect (`StoreUnavailable`), a connection errno, a name that does not resolve, a timeout, a SQLSTATE of
    class 08 or 57P01–57P03 or 53300, a connection asyncpg found closed."""
    if isinstance(error, StoreUnavailable):
        return True
    if isinstance(error, asyncpg.PostgresError):
        state = str(getattr(error, "sqlstate", "") or "")
        return state.startswith("08") or state in UNREACHABLE_SQLSTATES
    if isinstance(error, asyncpg.InterfaceError):
        text = str(error).lower()
        return "connection" in text and "pool is closed" not in text
    if isinstance(error, (ConnectionError, TimeoutError, socket.gaierror, socket.herror)):
        return True
    return isinstance(error, OSError) and error.errno in UNREACHABLE_ERRNOS


def is_transient(error: BaseException) -> bool:
    """True for a failure that waiting can cure: PostgreSQL unreachable, restarting or conflicting, a network error,
    a timeout. A bug, a constraint violation or bad input is not transient."""
    if isinstance(error, EruError):
        return error.code in _TRANSIENT_CODES
    if cannot_reach_server(error) or isinstance(error, _TRANSIENT_NATS):
        return True
    if isinstance(error, asyncpg.PostgresError):
        return str(getattr(error, "sqlstate", "") or "") in RERUN_SQLSTATES
    if isinstance(error, asyncpg.InternalClientError):
        # PostgreSQL killed mid-query leaves asyncpg's protocol of that connection busy ("cannot switch to state
        # 15; another operation (2) is in progress", seen in the fault suite's kill-postgres): the connection is
        # dead, a rerun gets another one from the pool. Any other internal client error stays a bug.
        return "another operation" in str(error)
    return False


def is_store_outage(error: BaseException) -> bool:
    """A transient failure of PostgreSQL itself (answered `store_unavailable` once the deadline has passed)."""
    if isinstance(error, StoreUnavailable):
        return True
    if isinstance(error, EruError):
        return False
    return is_transient(error) and not type(error).__module__.startswith("nats")


OnRetry = Callable[[BaseException, float, int], Awaitable[None]]


async def retry_transient(
    operation: Callable[[], Awaitable[T]],
    *,
    deadline_seconds: float,
    max_wait_seconds: float = 5.0,
    on_retry: OnRetry | None = None,
) -> T:
    """Run `operation`, rerunning it after transient failures with jittered exponential waits (0.2 s, 0.4 s, … capped
    at `max_wait_seconds`) until `deadline_seconds` have passed; then the last failure is raised as it was.

    `on_retry(error, wait, attempt)` runs before each wait (log it, keep a message in progress).
    """

    # The first attempt runs without tenacity: almost every call succeeds at once, and building the retry state for
    # each message costs the consumers more than their handlers' own work on small messages (docs/pipeline.md,
    # "Performance").
    started = time.monotonic()
    try:
        return await operation()
    except Exception as error:
        if deadline_seconds <= 0 or not is_transient(error):
            raise
        first_wait = min(FIRST_WAIT_SECONDS, max(max_wait_seconds, 0.05))
        if on_retry is not None:
            await on_retry(error, first_wait, 1)
    await asyncio.sleep(first_wait)

    async def before_sleep(state: RetryCallState) -> None:
        if on_retry is None or state.outcome is None:
            return
        error = state.outcome.exception()
        wait = state.next_action.sleep if state.next_action else 0.0
        if error is not None:
            await on_retry(error, wait, state.attempt_number + 1)

    retrying = AsyncRetrying(
        retry=retry_if_exception(is_transient),
        wait=wait_exponential_jitter(multiplier=0.2, max=max(max_wait_seconds, 0.05), jitter=0.1),
        stop=stop_after_delay(max(deadline_seconds - (time.monotonic() - started), 0.0)),
        before_sleep=before_sleep,
        reraise=True,
    )

    async def attempt() -> T:  # a coroutine function: tenacity would call a plain lambda synchronously
        return await operation()

    result: T = await retrying(attempt)
    return result


FIRST_WAIT_SECONDS = 0.2
