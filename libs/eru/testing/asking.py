"""How a client that publishes deploys onto the stream itself learns every outcome (docs/deploy.md "Clients: ask
again with the same request id"), shared by the failover tests' and benches' clients.

1. Store the request: publish it with its message id until the stream acknowledges it (a publish whose server died
   under it is sent again with the same id; the duplicate window keeps it once).
2. Wait for the answer. The answer is a core-NATS message, sent at most once: one sent while the client reconnects
   is lost. Ask again — the same body (same request id) stored under a NEW message id (the old one would be dropped
   as a duplicate), answered by the allocator from the deploy that request made — when either
   * the request has been **overtaken**: answers came for requests stored `OVERTAKEN_SECONDS` after it (the stack
     has moved past it, so its answer was lost or its message is held elsewhere), or
   * no answer came within `ASK_AGAIN_SECONDS` (doubling up to `LONGEST_WAIT_SECONDS`): the last resort.
   While the stack is stalled (a failover: nothing answered) nobody is overtaken, so a stall with hundreds of
   requests outstanding adds no load; a lost answer is asked for again seconds after answers flow again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from nats.js import JetStreamContext

from eru.bus import new_envelope
from eru.envelope import H_CORRELATION, H_SOURCE, H_TYPE

OVERTAKEN_SECONDS = 10.0
"""Answers normally come in the order requests were stored, in batches that span a few seconds: a request whose
later peers by this much are answered and it is not has lost its answer (or waits for a redelivery)."""
ASK_AGAIN_SECONDS = 60.0
LONGEST_WAIT_SECONDS = 120.0
LOOK_SECONDS = 1.0
PUBLISH_ACK_SECONDS = 2.0
PUBLISH_AGAIN_SECONDS = 0.2


@dataclass
class Progress:
    """How far the answers have come: the latest store time (monotonic) of a request that has been answered."""

    newest_answered: float = 0.0

    def answered(self, stored_at: float | None) -> None:
        """Note the answer to a request stored at `stored_at`."""
        if stored_at is not None:
            self.newest_answered = max(self.newest_answered, stored_at)


async def store(
    js: JetStreamContext,
    subject: str,
    body: bytes,
    headers: dict[str, str],
    until: float,
    ack_wait: float = PUBLISH_ACK_SECONDS,
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
    js: JetStreamContext,
    subject: str,
    body: bytes,
    headers: dict[str, str],
    answered: asyncio.Event,
    *,
    until: float,
    progress: Progress | None = None,
    wait: float = ASK_AGAIN_SECONDS,
    ack_wait: float = PUBLISH_ACK_SECONDS,
) -> int:
    """After the first ask was stored (now): ask again under a new message id when the request is overtaken (see
    `progress`) or `wait` (doubling) passed without `answered` being set, until `until` (monotonic); returns how many
    times it asked again."""
    asked = 0
    asked_at = time.monotonic()
    while not answered.is_set():
        look = min(LOOK_SECONDS, wait)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(answered.wait(), max(0.0, min(look, until - time.monotonic())))
        now = time.monotonic()
        if answered.is_set() or now >= until:
            break
        overtaken = progress is not None and progress.newest_answered - asked_at >= OVERTAKEN_SECONDS
        if not overtaken and now - asked_at < wait:
            continue
        kind, source = headers.get(H_TYPE, "eru.deploy.request"), headers.get(H_SOURCE, "client")
        again = new_envelope(kind, source, headers.get(H_CORRELATION))
        with contextlib.suppress(Exception):  # not stored before `until`: the caller sees it unanswered
            await store(js, subject, body, {**headers, **again.to_headers()}, until, ack_wait)
            asked += 1
        asked_at = time.monotonic()
        if not overtaken:
            wait = min(wait * 2, LONGEST_WAIT_SECONDS)
    return asked
