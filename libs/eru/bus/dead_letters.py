"""Dead letters: a message that can never be processed is stored under `eru.dlq.<original subject>` with the reason."""

from __future__ import annotations

from typing import Any

import structlog
from nats.js import JetStreamContext

from eru.bus.subjects import dead_letter
from eru.envelope import H_MSG_ID

log = structlog.get_logger()

H_REASON = "Eru-Dlq-Reason"
H_FIELD = "Eru-Dlq-Field"
H_SUBJECT = "Eru-Dlq-Subject"
H_STREAM = "Eru-Dlq-Stream"
H_SEQUENCE = "Eru-Dlq-Sequence"
H_CONSUMER = "Eru-Dlq-Consumer"
H_DELIVERIES = "Eru-Dlq-Deliveries"


def _one_line(text: str, limit: int = 1000) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


async def publish_dead_letter(
    js: JetStreamContext,
    msg: Any,
    reason: str,
    *,
    field: str | None = None,
    timeout: float | None = None,  # noqa: ASYNC109 - forwarded to the JetStream publish
) -> str:
    """Store the raw `msg` (body and headers unchanged) on its dead-letter subject; returns that subject.

    The dead letter's `Nats-Msg-Id` is derived from the original's stream position, so dead-lettering the same
    delivery twice keeps one copy.
    """
    metadata = msg.metadata
    headers = {k: v for k, v in (msg.headers or {}).items() if k != H_MSG_ID and not k.startswith("Nats-")}
    headers.update(
        {
            H_REASON: _one_line(reason),
            H_SUBJECT: msg.subject,
            H_STREAM: metadata.stream,
            H_SEQUENCE: str(metadata.sequence.stream),
            H_CONSUMER: metadata.consumer,
            H_DELIVERIES: str(metadata.num_delivered),
            H_MSG_ID: f"dlq:{metadata.stream}:{metadata.sequence.stream}:{metadata.consumer}",
        }
    )
    if field:
        headers[H_FIELD] = field
    subject = dead_letter(msg.subject)
    await js.publish(subject, msg.data, headers=headers, timeout=timeout)
    return subject
