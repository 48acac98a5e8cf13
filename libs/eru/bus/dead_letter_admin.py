"""Dead letters an operator can act on (`eru dlq ls | show | redrive`, docs/operations.md "Dead letters").

A dead letter is the original message (body and headers) stored under `eru.dlq.<original subject>` in ERU_DLQ with
`Eru-Dlq-*` headers saying why (eru.bus.dead_letters). Its id is its sequence in ERU_DLQ. Redriving publishes the
original body and envelope again on the original subject, with `Eru-Redrive-Of: <id>` (the allocator then lets a
dead-lettered request deploy — once: it is still deduplicated by its request id) and `Nats-Msg-Id = redrive:<id>`
(a repeated redrive within the stream's duplicate window is stored once); then the dead letter is deleted.
"""

from __future__ import annotations

import contextlib
import fnmatch
from collections.abc import AsyncIterator
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import datetime
from typing import Any

from nats.js import JetStreamContext, api
from nats.js.errors import NotFoundError

from eru.bus.codec import decode_value, media_type
from eru.bus.dead_letters import H_CONSUMER, H_DELIVERIES, H_FIELD, H_REASON, H_SEQUENCE, H_STREAM, H_SUBJECT
from eru.bus.delivery import H_REDRIVE
from eru.bus.errors import BusError
from eru.bus.replies import H_REPLY_TO
from eru.bus.streams import DLQ
from eru.envelope import H_CONTENT_TYPE, H_CORRELATION, H_ID, H_MSG_ID, H_TYPE
from eru.errors import EruError, InvalidInput, NotFound

INACTIVE_SECONDS = 30.0
BATCH = 256


@dataclass(frozen=True)
class DeadLetter:
    """One dead letter: where the message came from, why it was given up on, and the message itself."""

    id: int
    stored_at: datetime | None
    subject: str  # the original subject
    reason: str
    field: str | None
    stream: str
    stream_sequence: int | None
    consumer: str
    deliveries: int | None
    message_id: str
    message_type: str
    correlation_id: str
    headers: dict[str, str] = dataclass_field(repr=False)
    data: bytes = dataclass_field(repr=False)

    def body(self) -> Any:
        """The decoded body, or its first bytes in hex when it does not decode (a rejected message)."""
        try:
            return decode_value(self.data, media_type(self.headers.get(H_CONTENT_TYPE) or None))
        except InvalidInput as error:
            return {"undecodable": error.reason, "first_bytes": self.data[:64].hex(), "size": len(self.data)}

    def summary(self) -> dict[str, Any]:
        """The fields `eru dlq ls` shows."""
        return {
            "id": self.id,
            "stored_at": self.stored_at.isoformat() if self.stored_at else None,
            "subject": self.subject,
            "reason": self.reason,
            "field": self.field,
            "consumer": self.consumer,
            "deliveries": self.deliveries,
            "message_id": self.message_id,
            "correlation_id": self.correlation_id,
        }


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None


def dead_letter_of(sequence: int, subject: str, data: bytes, headers: dict[str, str] | None, at: Any) -> DeadLetter:
    """A `DeadLetter` from what ERU_DLQ stored at `sequence`."""
    found = dict(headers or {})
    return DeadLetter(
        id=sequence,
        stored_at=at if isinstance(at, datetime) else None,
        subject=found.get(H_SUBJECT) or subject.removeprefix("eru.dlq."),
        reason=found.get(H_REASON, ""),
        field=found.get(H_FIELD) or None,
        stream=found.get(H_STREAM, ""),
        stream_sequence=_int(found.get(H_SEQUENCE)),
        consumer=found.get(H_CONSUMER, ""),
        deliveries=_int(found.get(H_DELIVERIES)),
        message_id=found.get(H_ID, ""),
        message_type=found.get(H_TYPE, ""),
        correlation_id=found.get(H_CORRELATION, ""),
        headers=found,
        data=data or b"",
    )


async def list_dead_letters(js: JetStreamContext, *, subject: str | None = None) -> AsyncIterator[DeadLetter]:
    """Every dead letter in ERU_DLQ, oldest first; `subject` filters on the original subject (glob: `eru.deploy.*`).

    Reads through a short-lived ephemeral consumer (no acks, removed at the end), so nothing is disturbed.
    """
    try:
        info = await js.stream_info(DLQ)
    except NotFoundError:
        raise BusError(f"stream {DLQ} does not exist: is this eru's NATS server, provisioned?") from None
    if info.state.messages == 0:
        return
    config = api.ConsumerConfig(
        ack_policy=api.AckPolicy.NONE,
        inactive_threshold=INACTIVE_SECONDS,
        mem_storage=True,
        deliver_policy=api.DeliverPolicy.ALL,
    )
    consumer = await js.add_consumer(DLQ, config=config)
    subscription = await js.pull_subscribe_bind(stream=DLQ, name=consumer.name)
    try:
        while True:
            try:
                messages = await subscription.fetch(BATCH, timeout=1.0)
            except TimeoutError:
                return
            for msg in messages:
                metadata = msg.metadata
                letter = dead_letter_of(
                    metadata.sequence.stream, msg.subject, msg.data, msg.headers, metadata.timestamp
                )
                if subject is None or fnmatch.fnmatchcase(letter.subject, subject):
                    yield letter
                if metadata.num_pending == 0:
                    return
    finally:
        with contextlib.suppress(Exception):
            await subscription.unsubscribe()
        with contextlib.suppress(Exception):
            await js.delete_consumer(DLQ, consumer.name)


async def get_dead_letter(js: JetStreamContext, sequence: int) -> DeadLetter:
    """The dead letter with id `sequence`; `InvalidInput` on `id` when there is none (never was, or redriven)."""
    if sequence < 1:
        raise InvalidInput("id", f"dead-letter ids are ERU_DLQ sequences, starting at 1; got {sequence}")
    try:
        raw = await js.get_msg(DLQ, sequence)
    except NotFoundError:
        raise NotFound("id", f"no dead letter {sequence} (never stored, redriven, or expired)") from None
    return dead_letter_of(sequence, raw.subject or "", raw.data or b"", raw.headers, raw.time)


@dataclass(frozen=True)
class Redriven:
    """A redriven dead letter: where it went and its new stream position."""

    id: int
    subject: str
    stream: str
    sequence: int
    duplicate: bool


async def redrive(js: JetStreamContext, sequence: int) -> Redriven:
    """Publish dead letter `sequence` again on its original subject (see the module docstring), then delete it."""
    letter = await get_dead_letter(js, sequence)
    if not letter.subject or letter.subject.startswith("eru.dlq."):
        raise InvalidInput("id", f"dead letter {sequence} names no original subject ({H_SUBJECT} missing)")
    headers = {
        k: v for k, v in letter.headers.items() if not k.startswith("Eru-Dlq-") and k not in (H_MSG_ID, H_REPLY_TO)
    }
    headers[H_REDRIVE] = str(sequence)
    headers[H_MSG_ID] = f"redrive:{sequence}"
    try:
        ack = await js.publish(letter.subject, letter.data, headers=headers)
    except Exception as error:
        raise EruError(f"could not re-publish dead letter {sequence} on {letter.subject}: {error}") from None
    with contextlib.suppress(NotFoundError):
        await js.delete_msg(DLQ, sequence)
    return Redriven(sequence, letter.subject, ack.stream, ack.seq, bool(ack.duplicate))
