"""The pipelined batcher (eru_allocator.flow.batcher, docs/pipeline.md "Performance"): a key's next batch starts once
the running one says it may (`next_batch_may_start`), also for requests that arrive while it commits; without the
signal, batches follow one another."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Sequence

from eru_allocator.flow.batcher import Batcher, next_batch_may_start


class Recorder:
    """A `process` that records batches, says the next may start, then waits for `commit` (its commit)."""

    def __init__(self, *, signal: bool = True) -> None:
        self.signal = signal
        self.started: list[list[int]] = []
        self.commit = asyncio.Event()

    async def process(self, key: Hashable, items: Sequence[int]) -> list[int]:
        self.started.append(list(items))
        if self.signal:
            next_batch_may_start()
        if len(self.started) == 1:
            await self.commit.wait()
        return [item * 10 for item in items]


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_a_request_arriving_while_a_batch_commits_starts_the_next_batch() -> None:
    recorder = Recorder()
    batcher: Batcher[int, int] = Batcher(recorder.process, max_batch=4, pipelined=True)
    first = [asyncio.create_task(batcher.submit("p", n)) for n in range(3)]
    await _settle()
    assert recorder.started == [[0, 1, 2]]  # batch 1 commits (held), the queue is empty
    late = [asyncio.create_task(batcher.submit("p", n)) for n in (3, 4)]
    await _settle()
    assert recorder.started == [[0, 1, 2], [3, 4]]  # started while batch 1 still commits
    assert all(task.done() for task in late)
    assert not any(task.done() for task in first)
    recorder.commit.set()
    assert await asyncio.gather(*first) == [0, 10, 20]
    assert [task.result() for task in late] == [30, 40]


async def test_without_the_signal_batches_follow_one_another() -> None:
    recorder = Recorder(signal=False)
    batcher: Batcher[int, int] = Batcher(recorder.process, max_batch=4, pipelined=True)
    first = [asyncio.create_task(batcher.submit("p", n)) for n in range(3)]
    await _settle()
    late = asyncio.create_task(batcher.submit("p", 3))
    await _settle()
    assert recorder.started == [[0, 1, 2]]
    recorder.commit.set()
    assert await late == 30
    assert recorder.started == [[0, 1, 2], [3]]
    assert await asyncio.gather(*first) == [0, 10, 20]
