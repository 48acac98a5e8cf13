"""Store outages are transient (docs/store.md "Outages"): connection loss, refusal and timeouts are retried with
exponential backoff until a deadline (`ERU_STORE_RETRY_SECONDS`, default 120 s); only then does a request fail, with
`store_unavailable`.

The retry loop is tenacity's `AsyncRetrying` (a well-kept library: jittered exponential waits, a stop on elapsed time
and a hook before each sleep, which the consumer uses to keep the message in progress).
"""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg
import nats.errors
import nats.js.errors
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_delay, wait_exponential_jitter

from eru.errors import EruError
from eru.store.pool import StoreUnavailable

T = TypeVar("T")

_TRANSIENT_ERRNOS = frozenset(
    {errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EPIPE}
)
# PostgreSQL going away, restarting, refusing for a moment, or a concurrency conflict that a rerun resolves.
_TRANSIENT_POSTGRES: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.DeadlockDetectedError,
    asyncpg.exceptions.SerializationError,
    asyncpg.ConnectionDoesNotExistError,
)
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


def is_transient(error: BaseException) -> bool:
    """True for a failure that waiting can cure: PostgreSQL unreachable, restarting or conflicting, a network error,
    a timeout. A bug, a constraint violation or bad input is not transient."""
    if isinstance(error, EruError):
        return error.code in _TRANSIENT_CODES
    if isinstance(error, (*_TRANSIENT_POSTGRES, *_TRANSIENT_NATS, ConnectionError, TimeoutError)):
        return True
    if isinstance(error, asyncpg.InterfaceError):
        return "connection" in str(error).lower() and "pool is closed" not in str(error).lower()
    if isinstance(error, asyncpg.InternalClientError):
        # PostgreSQL killed mid-query leaves asyncpg's protocol of that connection busy ("cannot switch to state
        # 15; another operation (2) is in progress", seen in the fault suite's kill-postgres): the connection is
        # dead, a rerun gets another one from the pool. Any other internal client error stays a bug.
        return "another operation" in str(error)
    return isinstance(error, OSError) and error.errno in _TRANSIENT_ERRNOS


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
