"""Dead-lettered deploys recorded as settled even when the store was down (docs/store.md "Settled requests").

A deploy request is dead-lettered with `store_unavailable` exactly when PostgreSQL has been unreachable for
`store_retry_seconds`, so the deploy consumer cannot write its `settled_requests` row at that moment. The dead
letter itself is safe in ERU_DLQ. This durable consumer of ERU_DLQ (`allocator-dead-letters`, shared by every
replica) writes the settled row of every deploy dead letter, and acknowledges the letter only once the row is
written: while the store is down it naks with backoff and tries again, so the row appears as soon as the store is
back — and a replayed stream or a re-created consumer then answers the request `dead_lettered` instead of deploying
it. The write is idempotent (a request deployed meanwhile keeps its `accepted` row), and letters of other subjects,
or whose body never decoded (a replay is refused again, it can never deploy), are acknowledged untouched. The letter
stays in ERU_DLQ for `eru dlq ls | show | redrive`; this consumer never deletes anything. It writes through the
store's settled requests (`eru.store.delivery.SettledStore`).
"""

from __future__ import annotations

from typing import Any

import structlog
from nats.js import JetStreamContext

from eru.bus.codec import decode, media_type
from eru.bus.connection import describe
from eru.bus.consumer import Consumer, ConsumerOptions, Delivery
from eru.bus.dead_letters import H_REASON, H_SUBJECT
from eru.bus.delivery import delivery_of, envelope_of
from eru.bus.envelope import Envelope
from eru.bus.streams import DLQ
from eru.bus.subjects import DEAD_LETTER_PREFIX, DEPLOY_REQUEST, origin_subject, original_of_dead_letter
from eru.domain import DeployRequest
from eru.retry import is_transient
from eru.store.delivery import SettledStore
from eru_allocator.delivery.settled import dead_letter_key

log = structlog.get_logger()

DEAD_LETTER_CONSUMER = "allocator-dead-letters"


def is_deploy_request_subject(subject: str) -> bool:
    """Whether `subject` is where deploy requests arrive: `eru.deploy.request` or `eru.t.<tenant>.deploy.request`."""
    if subject == DEPLOY_REQUEST:
        return True
    parts = subject.split(".")
    return len(parts) == 5 and parts[:2] == ["eru", "t"] and parts[3:] == ["deploy", "request"]


class DeadLetterRecorder(Consumer[DeployRequest]):
    """Records each deploy dead letter of ERU_DLQ in `settled_requests`; see the module docstring."""

    def __init__(self, *args: Any, store: SettledStore, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.store = store

    async def _handle(self, msg: Any) -> None:
        headers = msg.headers or {}
        try:
            original = headers.get(H_SUBJECT) or original_of_dead_letter(msg.subject)
            original = origin_subject(original, headers)  # a routed request's letter: where its client sent it
        except Exception:
            original = ""
        if not is_deploy_request_subject(original):
            await msg.ack()
            return
        delivery = delivery_of(msg)
        try:
            envelope = envelope_of(msg)
            request = decode(msg.data, DeployRequest, media_type(delivery.content_type or None))
            key = dead_letter_key(original, request, envelope)
        except Exception:  # it never decoded: a replay of it is refused again, it can never deploy
            await msg.ack()
            return
        reason = str(headers.get(H_REASON) or "dead-lettered")[:1000]
        try:
            await self.store.record_dead_letter(key, reason, envelope.id)
        except Exception as error:
            if not is_transient(error):
                # not the store being away: a bug to see in the log; the letter is kept for `eru dlq`
                self._log.error("dlq.record_failed", request_id=key, error=describe(error))
                await msg.ack()
                return
            delay = self.options.delay_for(delivery.deliveries)
            self._log.warning("dlq.record_waiting_for_store", request_id=key, retry_in=delay, error=describe(error))
            await msg.nak(delay=delay)
            return
        self.stats.handled += 1
        self._count("handled")
        log.info("dlq.recorded", request_id=key, dead_letter_seq=delivery.stream_sequence)
        await msg.ack()


def dead_letter_recorder(js: JetStreamContext, store: SettledStore, stop: Any, source: str) -> DeadLetterRecorder:
    """The recorder over every dead letter of ERU_DLQ (it picks out the deploy requests itself)."""
    return DeadLetterRecorder(
        js,
        DLQ,
        DEAD_LETTER_CONSUMER,
        f"{DEAD_LETTER_PREFIX}.>",
        DeployRequest,
        _never_called,
        options=ConsumerOptions(concurrency=4, batch=64, backoff_seconds=(0.5, 1.0, 2.0, 5.0)),
        stop=stop,
        source=source,
        store=store,
    )


async def _never_called(_request: DeployRequest, _envelope: Envelope, _delivery: Delivery) -> None:
    raise AssertionError("DeadLetterRecorder handles its messages itself")  # pragma: no cover
