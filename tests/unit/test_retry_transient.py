"""`retry_transient`: the first attempt runs alone (no retry machinery), a transient failure is retried with waits
and reported to `on_retry` with increasing attempt numbers, anything else is raised at once, and the deadline holds."""

from __future__ import annotations

import pytest

from eru.errors import InvalidInput
from eru.retry import retry_transient


async def test_a_first_success_is_returned() -> None:
    async def work() -> int:
        return 7

    assert await retry_transient(work, deadline_seconds=5) == 7


async def test_transient_failures_are_retried_and_reported_in_order() -> None:
    calls = 0
    reported: list[tuple[str, int]] = []

    async def work() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ConnectionResetError("gone for a moment")
        return "done"

    async def on_retry(error: BaseException, wait: float, attempt: int) -> None:
        assert wait > 0
        reported.append((type(error).__name__, attempt))

    assert await retry_transient(work, deadline_seconds=10, max_wait_seconds=0.05, on_retry=on_retry) == "done"
    assert calls == 3
    assert reported == [("ConnectionResetError", 1), ("ConnectionResetError", 2)]


async def test_a_permanent_failure_is_raised_at_once() -> None:
    calls = 0

    async def work() -> None:
        nonlocal calls
        calls += 1
        raise InvalidInput("count", "must be ≥ 1")

    with pytest.raises(InvalidInput):
        await retry_transient(work, deadline_seconds=10)
    assert calls == 1


async def test_the_deadline_ends_the_retries_with_the_last_failure() -> None:
    calls = 0

    async def work() -> None:
        nonlocal calls
        calls += 1
        raise TimeoutError(f"attempt {calls}")

    with pytest.raises(TimeoutError):
        await retry_transient(work, deadline_seconds=0.5, max_wait_seconds=0.05)
    assert 2 <= calls < 50
    calls = 0
    with pytest.raises(TimeoutError):
        await retry_transient(work, deadline_seconds=0)
    assert calls == 1
