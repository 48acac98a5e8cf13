"""The CloudEvents envelope every eru message carries in its NATS headers (binary content mode).

`ce-id` doubles as `Nats-Msg-Id`, so JetStream drops a repeated publish of the same event inside the stream's
duplicate window. `ce-correlationid` ties every message of one deploy or decision together; `ce-causationid` is the
id of the message that caused this one.

It sits below the bus and the store, which both use it (docs/architecture.md "Package dependencies").
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from eru.errors import InvalidInput

SPEC_VERSION = "1.0"
H_ID = "ce-id"
H_TYPE = "ce-type"
H_SOURCE = "ce-source"
H_TIME = "ce-time"
H_SPECVERSION = "ce-specversion"
H_CORRELATION = "ce-correlationid"
H_CAUSATION = "ce-causationid"
H_MSG_ID = "Nats-Msg-Id"
H_CONTENT_TYPE = "Content-Type"
_REQUIRED = (H_ID, H_TYPE, H_SOURCE, H_TIME)


_RANDOM_CHUNK = 10 * 512  # random bytes read at once: 512 ids per system call
_random = bytearray()


def _forget_random() -> None:
    _random.clear()  # a forked child must not hand out its parent's next ids


os.register_at_fork(after_in_child=_forget_random)


def new_id() -> str:
    """A UUIDv7 (RFC 9562) string: unique, and sorting by id sorts by creation millisecond.

    Its 74 random bits come from `os.urandom`, read 512 ids at a time (a batch of 6,000 containers names 12,000
    commands and containers); the text is formatted directly, without a `uuid.UUID` object."""
    if not _random:
        _random.extend(os.urandom(_RANDOM_CHUNK))
    tail = int.from_bytes(_random[-10:], "big")
    del _random[-10:]
    millis = (time.time_ns() // 1_000_000) & 0xFFFF_FFFF_FFFF
    value = millis << 80 | 0x7 << 76 | (tail >> 4 & 0xFFF) << 64 | 0x2 << 62 | (tail & 0x3FFF_FFFF_FFFF_FFFF)
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC with microseconds and a `Z`: `2025-01-02T03:04:05.123456Z`."""
    if moment.tzinfo is None:
        raise InvalidInput(H_TIME, "a naive datetime has no time zone; pass an aware one")
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_time(text: str) -> datetime:
    """An RFC 3339 timestamp (with an offset or `Z`) as an aware datetime; `InvalidInput` on `ce-time` otherwise."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(H_TIME, f"{text!r} is not an RFC 3339 timestamp") from None
    if moment.tzinfo is None:
        raise InvalidInput(H_TIME, f"{text!r} has no time zone offset (RFC 3339 requires one)")
    return moment


@dataclass(frozen=True)
class Envelope:
    """Who sent what, when, and because of which message; travels as CloudEvents headers."""

    id: str
    type: str
    source: str
    time: datetime
    correlation_id: str
    causation_id: str | None = None
    specversion: str = SPEC_VERSION

    def to_headers(self) -> dict[str, str]:
        """The envelope as NATS headers, with `Nats-Msg-Id` = `ce-id` for JetStream deduplication."""
        headers = {
            H_SPECVERSION: self.specversion,
            H_ID: self.id,
            H_TYPE: self.type,
            H_SOURCE: self.source,
            H_TIME: format_time(self.time),
            H_CORRELATION: self.correlation_id,
            H_MSG_ID: self.id,
        }
        if self.causation_id:
            headers[H_CAUSATION] = self.causation_id
        return headers

    @classmethod
    def from_headers(cls, headers: Mapping[str, str] | None) -> Envelope:
        """The envelope in `headers`; `InvalidInput` naming the missing or malformed header otherwise.

        A missing correlation id means the message starts its own chain (correlation = its id).
        """
        found = dict(headers or {})
        for name in _REQUIRED:
            if not found.get(name, "").strip():
                raise InvalidInput(name, "missing envelope header")
        version = found.get(H_SPECVERSION, SPEC_VERSION)
        if version != SPEC_VERSION:
            raise InvalidInput(H_SPECVERSION, f"{version!r} is not supported (expected {SPEC_VERSION!r})")
        return cls(
            id=found[H_ID],
            type=found[H_TYPE],
            source=found[H_SOURCE],
            time=parse_time(found[H_TIME]),
            correlation_id=found.get(H_CORRELATION) or found[H_ID],
            causation_id=found.get(H_CAUSATION) or None,
            specversion=version,
        )

    def caused(self, type: str, source: str, *, time: datetime | None = None) -> Envelope:
        """The envelope of a message caused by this one: same correlation, causation = this id."""
        return new_envelope(type, source, causation=self, time=time)

    def with_id(self, message_id: str) -> Envelope:
        """The same envelope under another id (for a natural key that makes a repeat deduplicate)."""
        return replace(self, id=message_id)


def new_envelope(
    type: str,
    source: str,
    correlation_id: str | None = None,
    causation: Envelope | str | None = None,
    *,
    time: datetime | None = None,
    message_id: str | None = None,
) -> Envelope:
    """A fresh envelope; the time is the wall clock unless given.

    `causation` is the causing message's envelope or id. The correlation id is, in order: the one given, the causing
    envelope's, or the new message's own id (a new chain).
    """
    if not type.strip():
        raise InvalidInput(H_TYPE, "must not be empty")
    if not source.strip():
        raise InvalidInput(H_SOURCE, "must not be empty")
    event_id = message_id or new_id()
    causation_id = causation.id if isinstance(causation, Envelope) else causation
    if correlation_id is None and isinstance(causation, Envelope):
        correlation_id = causation.correlation_id
    return Envelope(
        id=event_id,
        type=type,
        source=source,
        time=time if time is not None else datetime.now(UTC),
        correlation_id=correlation_id or event_id,
        causation_id=causation_id or None,
    )
