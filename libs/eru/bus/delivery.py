"""What a consumer knows about one JetStream message: its `Delivery` (where it came from, how often it was
delivered) and its `Envelope` (a stand-in one for a message published without any)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from eru.bus.replies import H_REPLY_TO
from eru.envelope import H_CONTENT_TYPE, H_ID, H_MSG_ID, Envelope

EXTERNAL_SOURCE = "external"
H_REDRIVE = "Eru-Redrive-Of"  # set by `eru dlq redrive`: the dead letter's sequence in ERU_DLQ


@dataclass(frozen=True)
class Delivery:
    """Where a message came from and how often it has been delivered."""

    subject: str
    stream: str
    consumer: str
    stream_sequence: int
    deliveries: int
    pending: int
    timestamp: datetime
    headers: Mapping[str, str]
    content_type: str
    reply_to: str | None
    _msg: Any = field(default=None, repr=False, compare=False)

    @property
    def redriven(self) -> bool:
        """True when an operator re-submitted this message from the dead letters (`eru dlq redrive`)."""
        return bool(self.headers.get(H_REDRIVE))

    @property
    def payload(self) -> bytes:
        """The message's body as it was stored (routing passes it on unchanged)."""
        return bytes(self._msg.data) if self._msg is not None else b""

    async def in_progress(self) -> None:
        """Tell JetStream the handler is still working (resets the ack timer); for handlers longer than ack_wait."""
        if self._msg is not None:
            await self._msg.in_progress()


def envelope_of(msg: Any) -> Envelope:
    """The message's envelope; a message published without one (a plain NATS client) gets one from its metadata.

    The stand-in id is the `Nats-Msg-Id` or the stream position, so every redelivery sees the same id.
    """
    headers = msg.headers or {}
    if H_ID in headers:
        return Envelope.from_headers(headers)
    metadata = msg.metadata
    message_id = headers.get(H_MSG_ID) or f"{metadata.stream}:{metadata.sequence.stream}"
    return Envelope(
        id=message_id,
        type=msg.subject,
        source=EXTERNAL_SOURCE,
        time=metadata.timestamp,
        correlation_id=message_id,
    )


def delivery_of(msg: Any) -> Delivery:
    """The metadata of a JetStream message as a `Delivery`."""
    metadata = msg.metadata
    headers = dict(msg.headers or {})
    return Delivery(
        subject=msg.subject,
        stream=metadata.stream,
        consumer=metadata.consumer,
        stream_sequence=metadata.sequence.stream,
        deliveries=metadata.num_delivered,
        pending=metadata.num_pending,
        timestamp=metadata.timestamp,
        headers=headers,
        content_type=headers.get(H_CONTENT_TYPE, ""),
        reply_to=headers.get(H_REPLY_TO) or None,
        _msg=msg,
    )
