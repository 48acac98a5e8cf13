"""The dead-letter gate (eru_allocator.delivery.dead_letter_gate): a batch goes on only once the recorder has
acknowledged every dead letter; it waits while letters are outstanding and is retried later past its wait."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest

from eru.bus import Retryable
from eru.bus.errors import NoResponders
from eru.bus.protocol import Reply
from eru_allocator.delivery.dead_letter_gate import CONSUMER_INFO_SUBJECT, DeadLetterGate, outstanding


def test_nothing_outstanding_when_every_letter_is_acknowledged() -> None:
    assert outstanding({"num_pending": 0, "num_ack_pending": 0, "num_redelivered": 3}) is None


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        ({"num_pending": 2, "num_ack_pending": 0}, "2 dead letters not yet recorded"),
        ({"num_pending": 0, "num_ack_pending": 1}, "1 dead letters not yet recorded"),
        ({"error": {"code": 404, "description": "consumer not found"}}, "consumer not found"),
    ],
)
def test_undelivered_unacknowledged_or_a_missing_consumer_is_outstanding(
    info: Mapping[str, object], expected: str
) -> None:
    problem = outstanding(info)
    assert problem is not None
    assert expected in problem


class Answers:
    """A bus whose consumer-info answers are given in order (the last one repeats)."""

    def __init__(self, *answers: Mapping[str, object] | Exception) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    async def request(
        self, subject: str, payload: bytes, *, reply_within: float, headers: Mapping[str, str] | None = None
    ) -> Reply:
        self.asked.append(subject)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return Reply(json.dumps(answer).encode(), {})

    async def publish(self, subject: str, payload: bytes, *, headers: Mapping[str, str] | None = None) -> None:
        raise AssertionError("the gate only asks")


async def test_a_batch_waits_until_the_recorder_has_caught_up() -> None:
    bus = Answers(NoResponders("nobody serves it"), {"num_pending": 1}, {"num_ack_pending": 1}, {"num_pending": 0})
    gate = DeadLetterGate(bus, wait_seconds=5.0, poll_seconds=0.0)
    await gate.wait()
    assert gate.held == 1
    assert bus.asked == [CONSUMER_INFO_SUBJECT] * 4


async def test_no_wait_and_one_question_when_nothing_is_outstanding() -> None:
    bus = Answers({"num_pending": 0, "num_ack_pending": 0})
    gate = DeadLetterGate(bus)
    await gate.wait()
    assert (gate.held, len(bus.asked)) == (0, 1)


async def test_past_its_wait_the_batch_is_retried_later() -> None:
    gate = DeadLetterGate(Answers({"num_ack_pending": 1}), wait_seconds=0.05, poll_seconds=0.01)
    with pytest.raises(Retryable, match="1 dead letters not yet recorded"):
        await gate.wait()
