"""Fetching from a durable pull consumer without holding a delivered message back (docs/bus.md "Fetching").

The consumers now keep one pull request open instead (eru.bus.standing_pull); `fetch_ready` stays for one-off
reads that hold no request open after them, and as the comparison its tests make.

nats-py's `fetch(n)` for n > 1 returns early on a status message — possibly one meant for an earlier pull request —
and leaves its own pull request open on the server, waiting for the rest of the batch until it expires. The next
message is then delivered to that old request, and the next `fetch(n)` that receives it waits "for the rest" until
the old request's `408 Request Timeout` arrives: up to `fetch_timeout_seconds` (1 s) for a message that was there
at once. The soak at 5 deploys/s showed it in every stage (the node agents' commands 0.4–0.8 s late, deploy
requests and container events likewise; docs/performance.md "Tracing a request").

`fetch_ready` never waits for a batch to fill:

1. ONE message: what an earlier request already delivered to this subscription, else a lingering pull for one
   (`fetch(1)`, which returns as soon as it arrives; a request for one is fulfilled by it, so none is left behind);
2. then up to `batch - 1` more that are already there: first those delivered to this subscription, then a `no_wait`
   request without `expires`, which the server answers at once with what the consumer has (and `404` if fewer) —
   unless the last message says the consumer had nothing more pending (its ack subject's count is 0): at a trickle
   that request was a round trip per message for a `404`.

Under a backlog a fetch still takes a whole batch (two requests instead of one); when messages trickle in, each is
handed over as it arrives.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from nats.errors import TimeoutError as NatsTimeoutError

STATUS_HEADER = "Status"
HEARTBEAT_STATUS = "100"


def _status(msg: Any) -> str | None:
    headers = msg.headers
    return headers.get(STATUS_HEADER) if headers else None


def _take_queued(subscription: Any, limit: int) -> list[Any]:
    """Up to `limit` messages already delivered to the subscription (status messages of earlier requests dropped)."""
    inner = subscription._sub
    queue: asyncio.Queue[Any] = inner._pending_queue
    taken: list[Any] = []
    while len(taken) < limit and not queue.empty():
        msg = queue.get_nowait()
        inner._pending_size -= len(msg.data)
        queue.task_done()
        if _status(msg) is None:
            taken.append(msg)
    return taken


def _none_pending(msg: Any) -> bool:
    """Whether the consumer had nothing left to deliver when it delivered `msg` (its ack subject's pending count):
    then a `no_wait` request would only come back `404`, a round trip to the server for nothing. What is published
    after it is handed over by the next fetch at once."""
    try:
        return int(msg.metadata.num_pending) == 0
    except Exception:  # not a JetStream delivery (no ack subject to read): ask, as before
        return False


async def _take_available(subscription: Any, limit: int, within: float) -> list[Any]:
    """Up to `limit` messages the consumer has now: a `no_wait` pull without `expires`, answered at once."""
    request = json.dumps({"batch": limit, "no_wait": True}).encode()
    await subscription._nc.publish(subscription._nms, request, subscription._deliver)
    taken: list[Any] = []
    deadline = time.monotonic() + within
    while len(taken) < limit:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            msg = await subscription._sub.next_msg(timeout=remaining)
        except (TimeoutError, NatsTimeoutError):
            break
        status = _status(msg)
        if status is None:
            taken.append(msg)
        elif status != HEARTBEAT_STATUS:
            break  # 404 No Messages / 408: nothing more now (a late status of an older request ends it early too)
    return taken


async def fetch_ready(subscription: Any, batch: int, timeout: float) -> list[Any]:  # noqa: ASYNC109 - the pull's expiry
    """At least one message (waiting up to `timeout` for it, else `TimeoutError`), plus up to `batch - 1` more that
    are there already; never waits for a batch to fill."""
    messages: list[Any] = list(await subscription.fetch(1, timeout=timeout))
    if batch > len(messages):
        messages.extend(_take_queued(subscription, batch - len(messages)))
    if batch > len(messages) and not _none_pending(messages[-1]):
        messages.extend(await _take_available(subscription, batch - len(messages), timeout))
    return messages
