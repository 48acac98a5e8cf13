"""Group concurrent handler calls into one unit of work (one transaction, one commit, one lock acquisition).

The bus consumer runs many handlers at once; each one `submit`s its message and awaits its own result. One worker
per key takes everything queued (up to `max_batch`) and processes it together. If the batch fails, every message
in it fails (and is redelivered by the consumer); nothing is half committed because a batch is one transaction.

A pipelined batcher (`pipelined=True`) starts a key's next batch as soon as the running one calls
`next_batch_may_start()` (the deploy path: once a batch has planned and only commits, docs/pipeline.md
"Performance"), instead of when it returns; `process` orders what the overlapping batches do.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

_MAY_START: contextvars.ContextVar[asyncio.Event | None] = contextvars.ContextVar("next_batch_may_start", default=None)

ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")


class Batcher(Generic[ItemT, ResultT]):
    """`submit(key, item)` → the item's result from `process(key, items)` (one call per batch and key).

    A batch holds at most `max_batch` items and, with a `weight`, items of at most `max_weight` in total: large
    requests then go in smaller batches, so the next stage starts on the first batch while this one takes the next.
    """

    def __init__(
        self,
        process: Callable[[Hashable, Sequence[ItemT]], Awaitable[Sequence[ResultT]]],
        *,
        max_batch: int = 64,
        weight: Callable[[ItemT], int] | None = None,
        max_weight: int | None = None,
        pipelined: bool = False,
    ) -> None:
        self._process = process
        self._pipelined = pipelined
        self._max_batch = max_batch
        self._weight = weight
        self._max_weight = max_weight
        self._queues: dict[Hashable, list[tuple[ItemT, asyncio.Future[ResultT]]]] = {}
        self._workers: dict[Hashable, asyncio.Task[None]] = {}
        self._arrivals: dict[Hashable, asyncio.Event] = {}  # pipelined: a worker waiting for the next request
        self.batches = 0
        self.items = 0

    async def submit(self, key: Hashable, item: ItemT) -> ResultT:
        """Queue `item` under `key` and wait for its result (or its batch's exception)."""
        future: asyncio.Future[ResultT] = asyncio.get_running_loop().create_future()
        self._queues.setdefault(key, []).append((item, future))
        if (arrived := self._arrivals.get(key)) is not None:
            arrived.set()
        if key not in self._workers:
            self._workers[key] = asyncio.create_task(self._drain(key))
        return await future

    async def _drain(self, key: Hashable) -> None:
        running: set[asyncio.Task[None]] = set()
        try:
            # let the handlers started in the same loop turn queue up before the first batch
            await asyncio.sleep(0)
            while True:
                if not self._queues.get(key):
                    if not running:
                        break
                    # a batch still commits: the next starts with the first request that arrives meanwhile
                    arrived = self._arrivals[key] = asyncio.Event()
                    waiter = asyncio.create_task(arrived.wait())
                    await asyncio.wait({*running, waiter}, return_when=asyncio.FIRST_COMPLETED)
                    waiter.cancel()
                    self._arrivals.pop(key, None)
                    await asyncio.sleep(0)  # and with those its handlers queue in the same loop turn
                    continue
                queued = self._queues[key]
                size = self._batch_size(queued)
                batch, self._queues[key] = queued[:size], queued[size:]
                may_start = asyncio.Event()
                task = asyncio.create_task(self._run(key, batch, may_start))
                if not self._pipelined:
                    await task
                    continue
                running.add(task)
                task.add_done_callback(running.discard)
                waiter = asyncio.create_task(may_start.wait())
                await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
        finally:
            self._workers.pop(key, None)
            self._arrivals.pop(key, None)
            if self._queues.get(key):  # arrived while the last batch was finishing
                self._workers[key] = asyncio.create_task(self._drain(key))
            else:
                self._queues.pop(key, None)

    async def _run(
        self, key: Hashable, batch: list[tuple[ItemT, asyncio.Future[ResultT]]], may_start: asyncio.Event
    ) -> None:
        """Process one batch and settle its futures; `may_start` is set at the latest when it ends."""
        _MAY_START.set(may_start)
        try:
            results = await self._process(key, [item for item, _ in batch])
        except BaseException as error:  # every message of the batch fails the same way
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            if isinstance(error, asyncio.CancelledError):
                raise
            return
        finally:
            may_start.set()
        self.batches += 1
        self.items += len(batch)
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)

    def _batch_size(self, queued: Sequence[tuple[ItemT, object]]) -> int:
        """How many of the queued items the next batch takes: at most `max_batch`, and while their total weight
        stays within `max_weight` (at least one item, however heavy)."""
        size = min(len(queued), self._max_batch)
        if self._weight is None or self._max_weight is None:
            return size
        total = 0
        for index in range(size):
            total += self._weight(queued[index][0])
            if total > self._max_weight and index > 0:
                return index
        return size


def next_batch_may_start() -> None:
    """Called from a pipelined batcher's `process`: the key's next batch may be formed and started now. Elsewhere
    (a batcher that is not pipelined, a direct call) it does nothing."""
    event = _MAY_START.get()
    if event is not None:
        event.set()
