"""Starting many nodes in one process (eru_node_agent.starting): bounded, retried, never fatal."""

from __future__ import annotations

import asyncio

import pytest

from eru_node_agent.runtime.base import EngineUnavailable
from eru_node_agent.starting import START_RETRY_SECONDS, start_retry_seconds, start_until_done


class Flaky:
    """An agent whose first `failures` starts raise, counting how many of its kind start at once."""

    running = 0
    most = 0

    def __init__(self, node: str, failures: list[Exception], gate: asyncio.Event | None = None) -> None:
        self.node = node
        self.failures = failures
        self.gate = gate
        self.attempts = 0

    async def start(self) -> object:
        self.attempts += 1
        Flaky.running += 1
        Flaky.most = max(Flaky.most, Flaky.running)
        try:
            if self.gate is not None:
                await self.gate.wait()
            if self.failures:
                raise self.failures.pop(0)
            return None
        finally:
            Flaky.running -= 1


def no_wait(_attempt: int) -> float:
    return 0.0


async def test_a_failed_start_is_retried_instead_of_ending_the_process() -> None:
    agent = Flaky("n1", [TimeoutError("nats: timeout"), EngineUnavailable("engine away"), RuntimeError("bug")])
    assert await start_until_done(agent, asyncio.Event(), retry_seconds=no_wait) is True
    assert agent.attempts == 4


async def test_a_stop_ends_the_retries() -> None:
    stop = asyncio.Event()
    stop.set()
    agent = Flaky("n1", [TimeoutError("nats: timeout")])
    assert await start_until_done(agent, stop, retry_seconds=no_wait) is False
    assert agent.attempts == 0


async def test_at_most_the_semaphores_count_start_at_once() -> None:
    Flaky.running = Flaky.most = 0
    gate = asyncio.Event()
    starts = asyncio.Semaphore(3)
    agents = [Flaky(f"n{i}", [TimeoutError("x")] if i % 2 else [], gate) for i in range(10)]
    tasks = [asyncio.create_task(start_until_done(a, asyncio.Event(), starts, no_wait)) for a in agents]
    for _ in range(20):  # let every task reach the semaphore or the gate
        await asyncio.sleep(0)
    assert Flaky.running == 3
    gate.set()
    assert await asyncio.gather(*tasks) == [True] * 10
    assert Flaky.most == 3
    assert sum(a.attempts for a in agents) == 15


@pytest.mark.parametrize(("attempt", "seconds"), [(1, 2.0), (2, 4.0), (5, 30.0), (9, 30.0), (0, 2.0)])
def test_retry_waits_grow_then_stay(attempt: int, seconds: float) -> None:
    assert start_retry_seconds(attempt) == seconds
    assert START_RETRY_SECONDS[-1] == 30.0
