"""`eru.bus.pull.fetch_ready` against a real nats-server: a delivered message is handed over at once even when an
older pull request is still open on the server (what made the soak's 0.4–1 s stalls, docs/bus.md "Fetching"), a
backlog still comes in whole batches, and an idle fetch ends at its timeout."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from bus_helpers import count_pull_requests
from nats.js import api

from eru.bus.pull import fetch_ready

STREAM = "PULLTEST"
LONG = 10.0  # seconds: a pull's expiry, far above what handing over a present message may take on a loaded machine


async def subscription(js: Any, durable: str) -> Any:
    await js.add_stream(name=STREAM, subjects=["pull.>"])
    config = api.ConsumerConfig(durable_name=durable, ack_policy=api.AckPolicy.EXPLICIT, filter_subject="pull.>")
    await js.add_consumer(STREAM, config=config)
    return await js.pull_subscribe_bind(durable=durable, stream=STREAM)


async def leave_open_pull(nc: Any, sub: Any, batch: int) -> None:
    """What an earlier `fetch(batch)` leaves behind: its pull request still open on the server until it expires."""
    request = {"batch": batch, "expires": int(LONG * 2 * 1e9)}
    await nc.publish(sub._nms, json.dumps(request).encode(), sub._deliver)
    await nc.flush()


async def test_a_message_delivered_to_an_older_open_pull_is_handed_over_at_once(nc: Any, js: Any) -> None:
    sub = await subscription(js, "stalled")
    await leave_open_pull(nc, sub, 8)
    started = time.monotonic()
    fetching = asyncio.create_task(fetch_ready(sub, 8, LONG))
    await asyncio.sleep(0.2)
    await js.publish("pull.one", b"1")
    messages = await fetching
    elapsed = time.monotonic() - started
    assert [m.data for m in messages] == [b"1"]
    # nats-py's fetch(8) receives it through the old request and waits for 7 more until LONG (10 s) has passed
    assert elapsed < LONG / 2, f"held for {elapsed:.1f} s"


async def test_the_old_fetch_holds_it_until_the_pull_expires(nc: Any, js: Any) -> None:
    """The stall itself, so that the test above can fail: nats-py's batch fetch with the same old request open."""
    sub = await subscription(js, "old-way")
    await leave_open_pull(nc, sub, 8)
    started = time.monotonic()
    fetching = asyncio.create_task(sub.fetch(8, timeout=3.0))
    await asyncio.sleep(0.2)
    await js.publish("pull.one", b"1")
    messages = await fetching
    assert [m.data for m in messages] == [b"1"]
    assert time.monotonic() - started >= 2.9  # waited for the rest of the batch until its own timeout


async def test_a_backlog_comes_in_whole_batches(js: Any) -> None:
    sub = await subscription(js, "backlog")
    for index in range(20):
        await js.publish(f"pull.{index}", str(index).encode())
    sizes = []
    seen: list[bytes] = []
    for _ in range(3):
        messages = await fetch_ready(sub, 8, LONG)
        sizes.append(len(messages))
        seen.extend(m.data for m in messages)
        for msg in messages:
            await msg.ack()
    assert sizes == [8, 8, 4]
    assert seen == [str(i).encode() for i in range(20)]  # in stream order, none twice


async def test_an_idle_fetch_times_out_and_a_late_status_is_not_a_message(nc: Any, js: Any) -> None:
    sub = await subscription(js, "idle")
    with pytest.raises(TimeoutError):
        await fetch_ready(sub, 8, 0.3)
    await asyncio.sleep(0.5)  # the server's 408 for that pull arrives after the client gave up: left in the queue
    await js.publish("pull.after", b"after")
    messages = await fetch_ready(sub, 8, LONG)
    assert [m.data for m in messages] == [b"after"]


async def test_a_lone_message_costs_one_pull_request_not_two(nc: Any, js: Any) -> None:
    """Nothing else pending (the message's ack subject says 0): no `no_wait` request for more is sent, a round trip
    per message at a trickle. With a backlog behind it, the request for more is still made."""
    sub = await subscription(js, "lone")
    requests = count_pull_requests(nc, sub)
    await js.publish("pull.one", b"1")
    messages = await fetch_ready(sub, 8, LONG)
    assert [m.data for m in messages] == [b"1"]
    assert messages[0].metadata.num_pending == 0
    assert len(requests) == 1  # the fetch(1) only
    for index in range(3):
        await js.publish(f"pull.more.{index}", str(index).encode())
    requests.clear()
    messages = await fetch_ready(sub, 8, LONG)
    assert [m.data for m in messages] == [b"0", b"1", b"2"]
    assert len(requests) == 2  # the fetch(1), then the no_wait request that brought the other two
