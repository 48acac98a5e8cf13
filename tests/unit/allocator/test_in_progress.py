"""Deploy requests kept in progress by one loop (eru_allocator.flow.in_progress): a request that waits is told in
progress within an interval and again every half interval while it waits; one that is answered at once is never; the
loop runs only while something waits."""

from __future__ import annotations

import asyncio
from typing import cast

from eru.bus import Delivery
from eru_allocator.flow.in_progress import InProgress


class _Delivery:
    def __init__(self) -> None:
        self.words: list[float] = []
        self.said = asyncio.Event()

    async def in_progress(self) -> None:
        self.words.append(asyncio.get_running_loop().time())
        self.said.set()

    async def told(self, times: int, within: float = 10.0) -> None:
        """Until in progress was said `times` times."""
        async with asyncio.timeout(within):
            while len(self.words) < times:
                self.said.clear()
                await self.said.wait()


async def test_a_waiting_request_is_told_in_progress_and_a_quick_one_is_not() -> None:
    keeper = InProgress(0.2)
    slow, quick = _Delivery(), _Delivery()
    release: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    started = asyncio.get_running_loop().time()
    waiting = asyncio.create_task(keeper.around(release, cast(Delivery, slow)))
    assert await keeper.around(asyncio.sleep(0, "done"), cast(Delivery, quick)) == "done"
    await slow.told(2)
    release.set_result("answered")
    assert await waiting == "answered"
    assert quick.words == []
    assert slow.words[0] - started >= 0.1  # held at least half an interval before the first word
    assert keeper._ticker is not None
    await asyncio.wait_for(keeper._ticker, 10.0)  # nothing held: the loop ends
    told = len(slow.words)
    await asyncio.sleep(0.3)
    assert len(slow.words) == told


async def test_the_loop_starts_again_for_the_next_waiting_request() -> None:
    keeper = InProgress(0.1)
    first, second = _Delivery(), _Delivery()
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(keeper.around(done, cast(Delivery, first)))
    await first.told(1)
    done.set_result(None)
    await task
    assert keeper._ticker is not None
    await asyncio.wait_for(keeper._ticker, 10.0)
    later: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(keeper.around(later, cast(Delivery, second)))
    await second.told(1)
    later.set_result(None)
    await task
    assert keeper.told == len(first.words) + len(second.words)
