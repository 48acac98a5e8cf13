"""How a client that publishes deploys onto the stream itself learns every outcome (docs/deploy.md "Clients: ask
again with the same request id"), shared by the failover tests' and benches' clients.

1. Store the request: publish it with its message id until the stream acknowledges it (a publish whose server died
   under it is sent again with the same id; the duplicate window keeps it once).
2. Wait for the answer. The answer is a core-NATS message, sent at most once: one sent while the client reconnects
   is lost. No answer within `ASK_AGAIN_SECONDS`: store the same body (same request id) again under a NEW message id
   (the old one would be dropped as a duplicate); the allocator answers it from the deploy that request made. The
   wait doubles each time, up to `LONGEST_WAIT_SECONDS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from eru.bus import new_envelope
from eru.bus.envelope import H_CORRELATION, H_SOURCE, H_TYPE

ASK_AGAIN_SECONDS = 15.0
"""Longer than a failover's stall plus the backlog it leaves (10–15 s on a loaded 2-core machine), so asking again
is rare and adds little load exactly when the stack recovers."""
LONGEST_WAIT_SECONDS = 60.0
PUBLISH_ACK_SECONDS = 2.0
PUBLISH_AGAIN_SECONDS = 0.2


async def store(
    js: Any, subject: str, body: bytes, headers: dict[str, str], until: float, ack_wait: float = PUBLISH_ACK_SECONDS
) -> int:
    """Publish until the stream acknowledges within `ack_wait` (or `until`, a monotonic time, passes: the last error
    is raised); returns the number of publishes that were not acknowledged."""
    failures = 0
    while True:
        try:
            await js.publish(subject, body, headers=headers, timeout=ack_wait)
            return failures
        except Exception:  # not acknowledged (a server died under it, an election): the same id again
            failures += 1
            if time.monotonic() > until:
                raise
            await asyncio.sleep(PUBLISH_AGAIN_SECONDS)


async def ask_until_answered(
    js: Any,
    subject: str,
    body: bytes,
    headers: dict[str, str],
    answered: asyncio.Event,
    *,
    until: float,
    wait: float = ASK_AGAIN_SECONDS,
    ack_wait: float = PUBLISH_ACK_SECONDS,
) -> int:
    """After the first ask was stored: ask again under a new message id each time `wait` (doubling) passes without
    `answered` being set, until `until` (monotonic); returns how many times it asked again."""
    asked = 0
    while not answered.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(answered.wait(), max(0.0, min(wait, until - time.monotonic())))
        if answered.is_set() or time.monotonic() >= until:
            break
        kind, source = headers.get(H_TYPE, "eru.deploy.request"), headers.get(H_SOURCE, "client")
        again = new_envelope(kind, source, headers.get(H_CORRELATION))
        with contextlib.suppress(Exception):  # not stored before `until`: the caller sees it unanswered
            await store(js, subject, body, {**headers, **again.to_headers()}, until, ack_wait)
            asked += 1
        wait = min(wait * 2, LONGEST_WAIT_SECONDS)
    return asked
