"""The fault suite's wait for late answers (bench.faults.fuzz.late_answers): answers that keep coming are waited for,
however late; silence ends the wait; every request answered ends it at once."""

from __future__ import annotations

import asyncio
import time

from bench.faults.fuzz import late_answers


async def test_late_but_steady_answers_are_all_waited_for() -> None:
    answered: dict[str, bool] = {}
    keys = {f"f{i}" for i in range(5)}

    async def answer_slowly() -> None:
        for key in sorted(keys):
            await asyncio.sleep(0.15)  # each later than the allowed silence of 0.2 s would be in total
            answered[key] = True

    task = asyncio.create_task(answer_slowly())
    await late_answers(answered, keys, quiet_seconds=0.2)
    await task
    assert set(answered) == keys


async def test_silence_ends_the_wait_and_all_answered_ends_it_at_once() -> None:
    started = time.monotonic()
    await late_answers({"f0": True}, {"f0", "f1"}, quiet_seconds=0.2)
    assert time.monotonic() - started >= 0.2
    started = time.monotonic()
    await late_answers({"f0": True, "f1": False, "x": True}, {"f0", "f1"}, quiet_seconds=5)
    assert time.monotonic() - started < 5  # it did not wait out the silence
