"""Deploy requests kept in progress while they wait (docs/pipeline.md "Performance"): one loop for all of them.

A request may queue behind its pod's batches for longer than its `ack_wait` and must not be redelivered meanwhile,
so JetStream is told it is in progress. That used to be a timer per request (a task and an `asyncio.wait` each, ~20
µs of a burst's CPU per single request); now every request being handled is registered here, and one loop, running
only while something is registered, tells JetStream about each request held for at least half an `interval` every
half `interval`: the first word comes at most one `interval` after the request arrived, the next ones every half
`interval`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from eru.bus import Delivery

T = TypeVar("T")


class InProgress:
    """The deliveries being handled, and the one loop that keeps them in progress."""

    def __init__(self, interval: float) -> None:
        self.half = interval / 2
        self._held: dict[object, tuple[Delivery, float]] = {}  # a token per handling → (its delivery, since)
        self._ticker: asyncio.Task[None] | None = None
        self.told = 0  # in-progress words sent (a figure for tests)

    async def around(self, work: Awaitable[T], delivery: Delivery) -> T:
        """Await `work`, keeping `delivery` in progress until it is done."""
        token = object()
        loop = asyncio.get_running_loop()
        self._held[token] = (delivery, loop.time())
        if self._ticker is None or self._ticker.done():
            self._ticker = loop.create_task(self._tick())
        try:
            return await work
        finally:
            del self._held[token]

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while self._held:
            await asyncio.sleep(self.half)
            now = loop.time()
            due = [delivery for delivery, since in list(self._held.values()) if now - since >= self.half]
            for delivery in due:
                with contextlib.suppress(Exception):  # the next word comes half an interval later
                    await delivery.in_progress()
                self.told += 1
