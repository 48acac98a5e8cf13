"""`eru.bus.standing_pull.StandingPull` against a real nats-server: one open pull request serves a trickle of
messages (where `fetch_ready` sent one per message), what is delivered never exceeds the limit asked for, a stop
hands back what the open request brought at once, and a request the server ended is replaced without waiting for
its expiry (docs/bus.md "Fetching")."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bus_helpers import count_pull_requests
from nats.js import api

from eru.bus.pull import fetch_ready
from eru.bus.standing_pull import StandingPull

STREAM = "STANDING"
LONG = 10.0  # seconds: far above what handing over a present message may take on a loaded machine


async def bind(js: Any, durable: str, *, create: bool = True) -> Any:
    if create:
        config = api.ConsumerConfig(
            durable_name=durable, ack_policy=api.AckPolicy.EXPLICIT, filter_subject="standing.>", ack_wait=30.0
        )
        await js.add_consumer(STREAM, config=config)
    return await js.pull_subscribe_bind(durable=durable, stream=STREAM)


async def trickle(js: Any, fetch: Any, count: int) -> list[bytes]:
    """Publish `count` messages one at a time, each fetched (and acked) before the next is published."""
    seen: list[bytes] = []
    for index in range(count):
        await js.publish(f"standing.{index}", str(index).encode())
        messages = await fetch()
        seen.extend(m.data for m in messages)
        for msg in messages:
            await msg.ack()
    return seen


async def test_a_trickle_is_served_by_one_open_request(nc: Any, js: Any) -> None:
    await js.add_stream(name=STREAM, subjects=["standing.>"])
    sub = await bind(js, "trickle")
    requests = count_pull_requests(nc, sub)
    pull = StandingPull(sub, expires_seconds=LONG)
    seen = await trickle(js, lambda: pull.fetch(16, LONG), 10)
    assert seen == [str(i).encode() for i in range(10)]
    assert len(requests) == 1, requests
    assert pull.owed == 6


async def test_fetch_ready_asks_once_per_message_at_a_trickle(nc: Any, js: Any) -> None:
    """What the standing request saves, so that the test above can fail: one request per lone message."""
    await js.add_stream(name=STREAM, subjects=["standing.>"])
    sub = await bind(js, "per-message")
    requests = count_pull_requests(nc, sub)
    seen = await trickle(js, lambda: fetch_ready(sub, 16, LONG), 10)
    assert len(seen) == 10
    assert len(requests) == 10


async def test_no_more_is_delivered_than_the_limit_asked_for(nc: Any, js: Any) -> None:
    await js.add_stream(name=STREAM, subjects=["standing.>"])
    for index in range(10):
        await js.publish(f"standing.{index}", str(index).encode())
    sub = await bind(js, "bounded")
    pull = StandingPull(sub, expires_seconds=LONG)
    first = await pull.fetch(4, LONG)
    await nc.flush()
    await asyncio.sleep(0.2)  # were more delivered, they would be in the subscription's queue by now
    assert len(first) + sub._sub._pending_queue.qsize() == 4
    sizes = [len(first)]
    while sum(sizes) < 10:
        sizes.append(len(await pull.fetch(4, LONG)))
    assert sum(sizes) == 10
    assert max(sizes) <= 4


async def test_a_stop_hands_back_what_the_open_request_brought(nc: Any, js: Any) -> None:
    await js.add_stream(name=STREAM, subjects=["standing.>"])
    sub = await bind(js, "release")
    pull = StandingPull(sub, expires_seconds=1.0)
    await js.publish("standing.first", b"first")
    [first] = await pull.fetch(8, LONG)
    await first.ack()
    for index in range(3):
        await js.publish(f"standing.{index}", str(index).encode())
    await nc.flush()
    handed_back = await pull.release()
    assert handed_back == 3
    assert not pull.open
    # another subscriber of the consumer gets them now, not after ack_wait (30 s)
    other = await bind(js, "release", create=False)
    started = time.monotonic()
    again = await StandingPull(other, expires_seconds=1.0).fetch(8, LONG)
    got = [m.data for m in again]
    while len(got) < 3:
        got.extend(m.data for m in await StandingPull(other, expires_seconds=1.0).fetch(8, LONG))
    assert got == [b"0", b"1", b"2"]
    assert time.monotonic() - started < 5.0


async def test_a_request_the_server_ended_is_replaced_at_once(nc: Any, js: Any) -> None:
    """The consumer deleted under an open request (a `409`): the next fetch asks again instead of waiting for the
    old request's expiry, and a message published after the consumer is back arrives."""
    await js.add_stream(name=STREAM, subjects=["standing.>"])
    sub = await bind(js, "ended")
    requests = count_pull_requests(nc, sub)
    pull = StandingPull(sub, expires_seconds=LONG * 3)
    await js.publish("standing.a", b"a")
    [msg] = await pull.fetch(8, LONG)
    await msg.ack()
    assert pull.open
    await js.delete_consumer(STREAM, "ended")
    await bind(js, "ended")  # re-created: it starts with what the stream holds
    started = time.monotonic()
    messages = await pull.fetch(8, LONG)
    assert [m.data for m in messages] == [b"a"]  # delivered again by the new consumer
    assert time.monotonic() - started < LONG
    assert len(requests) == 2
