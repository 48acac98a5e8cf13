"""`StandingPull`'s bookkeeping of its one open request, over a fake subscription and a fake clock: when it asks,
for how many, when a request counts as ended (fulfilled, a status, or past its expiry plus the grace when the server
lost it) — the cases a real server shows only by chance (tests/integration/bus/test_standing_pull.py has the rest)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from eru.bus.standing_pull import GRACE_SECONDS, StandingPull


@dataclass
class Msg:
    data: bytes = b"x"
    headers: dict[str, str] | None = None
    nakked: int = 0

    async def nak(self) -> None:
        self.nakked += 1


def status(code: str) -> Msg:
    return Msg(b"", {"Status": code})


@dataclass
class FakeConnection:
    sent: list[dict[str, Any]] = field(default_factory=list)

    async def publish(self, subject: str, payload: bytes, reply: str) -> None:
        assert subject == "$JS.API.CONSUMER.MSG.NEXT.S.c"
        assert reply == "_INBOX.deliver"
        self.sent.append(json.loads(payload))


class FakeInner:
    def __init__(self) -> None:
        self._pending_queue: asyncio.Queue[Msg] = asyncio.Queue()
        self._pending_size = 0

    def deliver(self, *messages: Msg) -> None:
        for msg in messages:
            self._pending_size += len(msg.data)
            self._pending_queue.put_nowait(msg)


class FakeSubscription:
    def __init__(self) -> None:
        self._nc = FakeConnection()
        self._nms = "$JS.API.CONSUMER.MSG.NEXT.S.c"
        self._deliver = "_INBOX.deliver"
        self._sub = FakeInner()


class Clock:
    """The monotonic clock plus an offset a test moves forward (the waits inside still take real time)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


def standing(expires: float = 1.0) -> tuple[StandingPull, FakeSubscription, Clock]:
    sub, clock = FakeSubscription(), Clock()
    return StandingPull(sub, expires_seconds=expires, clock=clock), sub, clock


async def test_asks_once_for_the_limit_and_counts_deliveries_against_it() -> None:
    pull, sub, _ = standing()
    sub._sub.deliver(Msg(b"a"))
    assert [m.data for m in await pull.fetch(4, 0.01)] == [b"a"]  # already there: no request
    assert sub._nc.sent == []
    seen = []
    for name in (b"b", b"c", b"d"):
        fetching = asyncio.create_task(pull.fetch(4, 5.0))
        await asyncio.sleep(0)
        sub._sub.deliver(Msg(name))
        seen.extend(m.data for m in await fetching)
    assert seen == [b"b", b"c", b"d"]
    assert sub._nc.sent == [{"batch": 4, "expires": 1_000_000_000}]  # one request served b, c, d
    assert pull.owed == 1
    assert sub._sub._pending_size == 0


async def test_a_fulfilled_request_is_followed_by_a_new_one() -> None:
    pull, sub, _ = standing()
    fetching = asyncio.create_task(pull.fetch(2, 5.0))
    await asyncio.sleep(0)
    sub._sub.deliver(Msg(b"a"), Msg(b"b"))
    assert [m.data for m in await fetching] == [b"a", b"b"]
    assert pull.owed == 0
    assert not pull.open
    fetching = asyncio.create_task(pull.fetch(3, 5.0))
    await asyncio.sleep(0)
    assert [r["batch"] for r in sub._nc.sent] == [2, 3]
    fetching.cancel()


@pytest.mark.parametrize("code", ["408", "409"])
async def test_a_status_ends_the_request_and_is_not_a_message(code: str) -> None:
    pull, sub, _ = standing()
    fetching = asyncio.create_task(pull.fetch(8, 5.0))
    await asyncio.sleep(0)
    sub._sub.deliver(status(code))
    await asyncio.sleep(0)
    assert len(sub._nc.sent) == 2  # ended, so asked again at once, not after the expiry
    sub._sub.deliver(Msg(b"a"))
    assert [m.data for m in await fetching] == [b"a"]


async def test_a_heartbeat_does_not_end_the_request() -> None:
    pull, sub, _ = standing()
    fetching = asyncio.create_task(pull.fetch(8, 5.0))
    await asyncio.sleep(0)
    sub._sub.deliver(status("100"), Msg(b"a"))
    assert [m.data for m in await fetching] == [b"a"]
    assert len(sub._nc.sent) == 1
    assert pull.owed == 7


async def test_a_request_lost_without_a_status_counts_as_ended_after_expiry_and_grace() -> None:
    pull, sub, clock = standing(expires=1.0)
    fetching = asyncio.create_task(pull.fetch(8, 0.05))
    await asyncio.sleep(0)
    with pytest.raises(TimeoutError):
        await fetching
    assert pull.open
    clock.offset += 1.0 + GRACE_SECONDS / 2 - 0.05
    assert pull.open  # the server's 408 may still be on its way
    clock.offset += GRACE_SECONDS
    assert not pull.open
    assert pull.owed == 0
    fetching = asyncio.create_task(pull.fetch(8, 0.05))
    await asyncio.sleep(0)
    assert len(sub._nc.sent) == 2
    fetching.cancel()


async def test_release_naks_what_was_held_once_the_request_has_ended() -> None:
    pull, sub, _ = standing(expires=1.0)
    fetching = asyncio.create_task(pull.fetch(4, 5.0))
    await asyncio.sleep(0)
    first, held = Msg(b"a"), Msg(b"b")
    sub._sub.deliver(first)
    await fetching
    pull.give_back([first])
    sub._sub.deliver(held, status("408"))
    assert await pull.release() == 2
    assert (first.nakked, held.nakked) == (1, 1)
    assert len(sub._nc.sent) == 1  # nothing asked while releasing
    assert not pull.open


async def test_release_waits_no_longer_than_the_request_may_live() -> None:
    pull, sub, _ = standing(expires=0.05)
    fetching = asyncio.create_task(pull.fetch(4, 5.0))
    await asyncio.sleep(0)
    sub._sub.deliver(Msg(b"a"))
    await fetching
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await pull.release() == 0
    assert loop.time() - started < 0.05 + GRACE_SECONDS + 0.5


async def test_limits_below_one_are_refused() -> None:
    pull, _, _ = standing()
    with pytest.raises(ValueError, match="limit"):
        await pull.fetch(0, 1.0)
    with pytest.raises(ValueError, match="expires"):
        StandingPull(FakeSubscription(), expires_seconds=0)


async def test_take_delivered_hands_over_what_is_there_and_never_asks() -> None:
    pull, sub, _ = standing()
    assert pull.take_delivered(8) == []  # nothing delivered: nothing taken, and no request sent
    assert sub._nc.sent == []
    sub._sub.deliver(Msg(b"a"), status("100"), Msg(b"b"), Msg(b"c"))
    assert [m.data for m in pull.take_delivered(2)] == [b"a", b"b"]  # a heartbeat is read and dropped
    assert pull.take_delivered(0) == []
    assert [m.data for m in pull.take_delivered(8)] == [b"c"]
    assert pull.take_delivered(8) == []
    assert sub._nc.sent == []
    assert sub._sub._pending_size == 0
