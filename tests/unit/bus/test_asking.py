"""When a client asks again (eru.testing.asking, docs/deploy.md "Clients: ask again with the same request id"): at
once when answers came for requests stored well after its own (its answer was lost), never while nothing is answered
(a stall) until its last-resort wait, and always under a new message id with the same body."""

from __future__ import annotations

import asyncio
import time

import pytest

from eru.bus import new_envelope
from eru.bus.publish import message_headers
from eru.testing import asking


class Stream:
    """Records what was published (a stand-in for the JetStream context, which acknowledges every publish)."""

    def __init__(self, answers: asyncio.Event | None = None, answer_at: int = 1) -> None:
        self.published: list[tuple[bytes, dict[str, str]]] = []
        self.at: list[float] = []
        self.answers = answers  # set on the `answer_at`th publish: the stack answers that ask
        self.answer_at = answer_at

    async def publish(self, subject: str, body: bytes, headers: dict[str, str], **options: float) -> None:
        self.published.append((body, headers))
        self.at.append(time.monotonic())
        if self.answers is not None and len(self.published) >= self.answer_at:
            self.answers.set()


@pytest.fixture(autouse=True)
def quick_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asking, "LOOK_SECONDS", 0.01)


def first_ask() -> dict[str, str]:
    return {**message_headers(new_envelope("eru.deploy.request", "client")), "Eru-Reply-To": "_INBOX.x.r1"}


async def test_an_overtaken_request_asks_again_at_once_with_a_new_message_id() -> None:
    headers, answered = first_ask(), asyncio.Event()
    js = Stream(answers=answered)
    progress = asking.Progress(newest_answered=time.monotonic() + asking.OVERTAKEN_SECONDS + 1)
    started = time.monotonic()
    asked = await asking.ask_until_answered(
        js, "s", b"body", headers, answered, until=time.monotonic() + 30, progress=progress
    )
    assert asked == 1
    assert time.monotonic() - started < 5  # long before the 60 s last resort
    body, again = js.published[0]
    assert body == b"body"
    assert again["Nats-Msg-Id"] != headers["Nats-Msg-Id"]
    assert again["Eru-Reply-To"] == headers["Eru-Reply-To"]
    assert again["ce-correlationid"] == headers["ce-correlationid"]


async def test_a_stall_adds_no_asks_until_the_last_resort() -> None:
    js, answered = Stream(), asyncio.Event()
    progress = asking.Progress()  # nothing answered: the stack is stalled
    asked = await asking.ask_until_answered(
        js, "s", b"body", first_ask(), answered, until=time.monotonic() + 0.5, progress=progress, wait=60.0
    )
    assert asked == 0
    assert js.published == []


async def test_the_last_resort_wait_doubles() -> None:
    answered = asyncio.Event()
    js = Stream(answers=answered, answer_at=3)
    started = time.monotonic()
    asked = await asking.ask_until_answered(js, "s", b"body", first_ask(), answered, until=started + 60, wait=0.1)
    assert asked == 3
    gaps = [b - a for a, b in zip([started, *js.at], js.at, strict=False)]
    assert [round(gap, 1) >= least for gap, least in zip(gaps, (0.1, 0.2, 0.4), strict=True)] == [True] * 3, gaps
    assert len({headers["Nats-Msg-Id"] for _, headers in js.published}) == 3
