"""One pull request kept open for a consumer's free handler slots (docs/bus.md "Fetching").

A pull consumer asks JetStream for messages with a pull request (`$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>`,
`{"batch": n, "expires": ns}`); the server delivers up to `n` messages to it as they are published, then the
request ends: fulfilled, or with a `408` status when it expires (a `409` when the consumer is deleted, its leader
changes or the server shuts down). `fetch_ready` (eru.bus.pull) sent one request per message it waited for: at a
trickle, every deploy request, node command and container event cost its consumer a message to nats-server and the
server a waiting request to set up, ~3 of the ~15 messages a single deploy sends (docs/performance.md "A trickle:
per message, not per container").

`StandingPull` keeps ONE request open for the slots the consumer has free when it asks, and hands over each message
as it arrives, without another request:

* `fetch(limit, timeout)` returns what was delivered already (up to `limit`), else waits up to `timeout` for the
  first message; it never waits for a batch to fill;
* when no request is open (fulfilled, ended by a status, or past its expiry plus a grace, for a request the server
  lost in a restart), it sends one for `limit`: the consumer's free slots, or its paced batch (a replica that mostly
  routes reads one at a time, eru.bus.intake_pace), so what is delivered and not handled yet never exceeds what the
  consumer had room for when it asked — the bound `fetch(limit)` kept;
* `release()` (on stop) waits for the open request to end (≤ its expiry plus a grace: a message nakked while it is
  open is delivered to it again at once), then naks what was delivered and not taken, so another replica gets it
  within a second instead of after `ack_wait`.

At a trickle of 50 messages a second with 16 free slots, that is ~4 requests a second instead of 50; under a backlog
one request per batch, as before. The expiry is the consumer's `fetch_timeout_seconds` (1 s), so an idle consumer
still asks once a second and a request lost with its server is replaced within 1 s plus the grace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

STATUS_HEADER = "Status"
HEARTBEAT_STATUS = "100"
# A request is taken for ended this long after its expiry even when no status came (the server restarted and lost
# it): long enough for the `408` to arrive first on a loaded machine, so a late 408 rarely meets the next request.
GRACE_SECONDS = 0.25


def status_of(msg: Any) -> str | None:
    """The status of a JetStream control message (`408`, `409`, `100` …), None for a delivered message."""
    headers = msg.headers
    return headers.get(STATUS_HEADER) if headers else None


class StandingPull:
    """Fetches from a nats-py pull subscription through one open pull request at a time (module docstring)."""

    def __init__(
        self,
        subscription: Any,
        *,
        expires_seconds: float,
        grace_seconds: float = GRACE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if expires_seconds <= 0:
            raise ValueError("expires_seconds must be positive")
        self._subscription = subscription
        self._inner = subscription._sub
        self._queue: asyncio.Queue[Any] = self._inner._pending_queue
        self._expires = expires_seconds
        self._grace = grace_seconds
        self._clock = clock
        self._owed = 0  # messages the open request may still bring
        self._ends_at = 0.0  # when it is taken for ended without a status
        self.requests = 0  # pull requests sent (for the consumer's figures and tests)
        self._returned: list[Any] = []  # taken, then given back before a stop: nakked by `release`

    @property
    def open(self) -> bool:
        """Whether a pull request is open: it may still bring messages."""
        return self._owed > 0 and self._clock() < self._ends_at

    @property
    def owed(self) -> int:
        """How many messages the open request may still bring (0 when none is open)."""
        return self._owed if self.open else 0

    async def fetch(self, limit: int, timeout: float) -> list[Any]:  # noqa: ASYNC109 - bounds the wait, as fetch's
        """At least one message (waiting up to `timeout`, else `TimeoutError`), plus up to `limit - 1` more that are
        there already; asks the server for `limit` when no request is open."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        taken = self._take(limit)
        if taken:
            return taken
        deadline = self._clock() + timeout
        while True:
            if not self.open:
                await self._ask(limit)
            now = self._clock()
            if now >= deadline:
                raise TimeoutError
            wait = min(deadline, self._ends_at) - now
            try:
                async with asyncio.timeout(max(wait, 0.0)):
                    msg = await self._queue.get()
            except TimeoutError:
                continue  # the deadline passed (raised above) or the request ended: ask again
            self._inner._pending_size -= len(msg.data)
            self._queue.task_done()
            if self._delivered(msg):
                return [msg, *self._take(limit - 1)]

    def take_delivered(self, limit: int) -> list[Any]:
        """Up to `limit` messages the server delivered already and nobody took yet; never waits, never asks. A
        consumer whose pace fell (a paced replica asks for one at a time) takes these at once: they are its own
        now, and the rest of the open request's delivery would otherwise wait one paced fetch per message."""
        return self._take(limit) if limit > 0 else []

    def give_back(self, messages: list[Any]) -> None:
        """Messages taken but not to be handled (the consumer is stopping): `release` naks them with the rest."""
        self._returned.extend(messages)

    async def release(self) -> int:
        """Nak what was delivered and not taken, and what the open request still brings until it ends; returns how
        many were handed back. The naks wait for the request's end — a message nakked while it is open is
        delivered to it again at once — so this takes up to the request's expiry plus the grace."""
        held = [*self._returned, *self._take(self._queue.qsize())]
        self._returned = []
        while self.open:
            try:
                async with asyncio.timeout(max(self._ends_at - self._clock(), 0.0)):
                    msg = await self._queue.get()
            except TimeoutError:
                break
            self._inner._pending_size -= len(msg.data)
            self._queue.task_done()
            if self._delivered(msg):
                held.append(msg)
        held.extend(self._take(self._queue.qsize()))
        handed_back = 0
        for msg in held:
            handed_back += await _nak(msg)
        return handed_back

    def _take(self, limit: int) -> list[Any]:
        """Up to `limit` messages already delivered to the subscription (status messages read and dropped)."""
        taken: list[Any] = []
        queue = self._queue
        while len(taken) < limit and not queue.empty():
            msg = queue.get_nowait()
            self._inner._pending_size -= len(msg.data)
            queue.task_done()
            if self._delivered(msg):
                taken.append(msg)
        return taken

    def _delivered(self, msg: Any) -> bool:
        """Count a message against the open request; a status other than a heartbeat ends the request."""
        status = status_of(msg)
        if status is None:
            self._owed = max(self._owed - 1, 0)
            return True
        if status != HEARTBEAT_STATUS:
            self._owed = 0  # 408 expired, 409 deleted / leader changed / server shutdown …: ask again next time
        return False

    async def _ask(self, limit: int) -> None:
        request = {"batch": limit, "expires": int(self._expires * 1e9)}
        subscription = self._subscription
        await subscription._nc.publish(subscription._nms, json.dumps(request).encode(), subscription._deliver)
        self.requests += 1
        self._owed = limit
        self._ends_at = self._clock() + self._expires + self._grace


async def _nak(msg: Any) -> int:
    with contextlib.suppress(Exception):
        await msg.nak()
        return 1
    return 0
