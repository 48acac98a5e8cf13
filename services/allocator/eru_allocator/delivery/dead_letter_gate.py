"""No replay of a dead-lettered deploy deploys while its dead letter is unrecorded (docs/store.md "Settled
requests").

A deploy dead-lettered while PostgreSQL was unreachable gets its `dead_lettered` row only from the recorder
(eru_allocator.delivery.dead_letter_recorder, durable consumer `allocator-dead-letters` on ERU_DLQ), once the store is
back: up to its nak back-off (5 s) later. A replay of that request handled in between (a consumer re-created by hand, a
replayed stream) found no row and deployed it. So before a batch looks its request ids up, `DeadLetterGate.wait`
asks JetStream for the recorder's state and lets the batch on only when no letter is undelivered or unacknowledged:
the recorder acknowledges a letter only after its row is committed, so every letter stored before that answer has
its row, and the batch's lookup, made after it, finds it. While letters are outstanding the batch waits (polling)
up to `wait_seconds`, then is tried again later (`Retryable`): a request is never planned while a dead letter may
be unrecorded. The cost is one JetStream API request per batch (not per request).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from eru.bus import Retryable
from eru.bus.errors import NoResponders, RequestTimeout
from eru.bus.protocol import Bus
from eru.bus.streams import DLQ
from eru_allocator.delivery.dead_letter_recorder import DEAD_LETTER_CONSUMER as RECORDER_CONSUMER

log = structlog.get_logger()

CONSUMER_INFO_SUBJECT = f"$JS.API.CONSUMER.INFO.{DLQ}.{RECORDER_CONSUMER}"


def outstanding(info: Mapping[str, Any]) -> str | None:
    """None when the recorder has acknowledged every dead letter of ERU_DLQ, judged from a JetStream consumer-info
    answer (pure); else why not: letters not yet delivered to it (`num_pending`), delivered but not acknowledged
    (`num_ack_pending`: being written, or naked while the store is away), or the consumer missing (being
    re-created, eru.bus.consumer heals it within seconds)."""
    error = info.get("error")
    if error is not None:
        description = error.get("description", error) if isinstance(error, Mapping) else error
        return f"consumer {RECORDER_CONSUMER}: {description}"
    undelivered = int(info.get("num_pending") or 0)
    unacknowledged = int(info.get("num_ack_pending") or 0)
    if undelivered or unacknowledged:
        return f"{undelivered + unacknowledged} dead letters not yet recorded by {RECORDER_CONSUMER}"
    return None


@dataclass
class DeadLetterGate:
    """See the module docstring. `held` counts the batches that had to wait (tests, telemetry)."""

    bus: Bus
    wait_seconds: float = 10.0
    poll_seconds: float = 0.1
    ask_within: float = 5.0
    held: int = 0

    async def check(self) -> str | None:
        """One look at the recorder: None when every letter is recorded, else what is outstanding."""
        try:
            reply = await self.bus.request(CONSUMER_INFO_SUBJECT, b"", reply_within=self.ask_within)
        except (NoResponders, RequestTimeout) as error:
            return f"consumer {RECORDER_CONSUMER}: {error}"
        try:
            info = json.loads(reply.data)
        except ValueError:
            return f"consumer {RECORDER_CONSUMER}: an answer that is not JSON"
        return outstanding(info) if isinstance(info, Mapping) else f"consumer {RECORDER_CONSUMER}: not an object"

    async def wait(self) -> None:
        """Return once every dead letter is recorded; `Retryable` (the batch comes back later) past `wait_seconds`."""
        problem = await self.check()
        if problem is None:
            return
        self.held += 1
        log.warning("deploy.waiting_for_dead_letters", reason=problem)
        deadline = time.monotonic() + self.wait_seconds
        while problem is not None:
            if time.monotonic() >= deadline:
                raise Retryable(f"{problem}; a dead-lettered request must not deploy meanwhile", delay=1.0)
            await asyncio.sleep(self.poll_seconds)
            problem = await self.check()
