"""The harness's burst wait (`while_progressing`): slow answers that keep coming pass, a stall fails fast."""

from __future__ import annotations

import asyncio

import pytest
from pipeline_harness import while_progressing


async def answer_after(seconds: float, value: int) -> int:
    await asyncio.sleep(seconds)
    return value


async def test_answers_that_keep_coming_pass_however_long_the_burst_takes() -> None:
    # 6 answers 0.1 s apart: the burst takes 0.6 s, three times the allowed stall, and passes in order
    results = await while_progressing([answer_after(0.1 * (i + 1), i) for i in range(6)], stall_seconds=0.2)
    assert results == list(range(6))


async def test_a_stall_fails_naming_what_is_still_open() -> None:
    never = asyncio.Event()
    with pytest.raises(AssertionError, match=r"no progress for 0.2s: 2 of 3 still open"):
        await while_progressing([answer_after(0.01, 1), never.wait(), never.wait()], stall_seconds=0.2)


async def test_a_failed_request_fails_the_burst() -> None:
    async def refused() -> int:
        raise RuntimeError("no schedulable node")

    with pytest.raises(RuntimeError, match="no schedulable node"):
        await while_progressing([refused(), answer_after(5, 1)], stall_seconds=10)
