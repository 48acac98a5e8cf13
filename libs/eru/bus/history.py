"""Reading what the streams recorded, for debugging (`eru events …`, `eru replay`): docs/bus.md.

A read creates a short-lived ephemeral pull consumer (no acks, memory state, removed at the end and, should the
reader die, by the server after `INACTIVE_SECONDS`), so it never disturbs the services' durable consumers.
Filtering by subject happens in the server; filtering by deploy, node or type happens here, on the envelope.
"""

from __future__ import annotations

import contextlib
import fnmatch
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nats.js import JetStreamContext, api
from nats.js.errors import NotFoundError

from eru.bus.codec import decode_value, media_type
from eru.bus.errors import BusError
from eru.bus.streams import DEPLOY, DLQ, EVENTS, METRICS, NODE
from eru.envelope import H_CONTENT_TYPE, Envelope
from eru.errors import InvalidInput

# Streams whose messages tell a story (commands, events, decisions); metrics are read only when asked for.
STORY_STREAMS = (DEPLOY, NODE, EVENTS, DLQ)
ALL_STREAMS = (*STORY_STREAMS, METRICS)
INACTIVE_SECONDS = 30.0
BATCH = 256


@dataclass(frozen=True)
class RecordedMessage:
    """One stored message with where it was stored, its envelope (None if it had none) and its decoded body."""

    stream: str
    sequence: int
    subject: str
    stored_at: datetime
    envelope: Envelope | None
    body: Any

    @property
    def type(self) -> str:
        """`ce-type`, or the subject for a message without an envelope."""
        return self.envelope.type if self.envelope else self.subject

    @property
    def correlation_id(self) -> str:
        """The deploy or decision the message belongs to ('' without an envelope)."""
        return self.envelope.correlation_id if self.envelope else ""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready form, one per line in `--json` output."""
        envelope = self.envelope
        return {
            "stream": self.stream,
            "seq": self.sequence,
            "subject": self.subject,
            "stored_at": self.stored_at.isoformat(),
            "id": envelope.id if envelope else None,
            "type": self.type,
            "source": envelope.source if envelope else None,
            "correlation_id": envelope.correlation_id if envelope else None,
            "causation_id": envelope.causation_id if envelope else None,
            "body": self.body,
        }


@dataclass(frozen=True)
class Selection:
    """Which messages to show; every given criterion must hold."""

    deploy: str | None = None
    node: str | None = None
    type_pattern: str | None = None
    message_id: str | None = None

    def matches(self, message: RecordedMessage) -> bool:
        """True when `message` passes every criterion."""
        tokens = message.subject.split(".")
        if self.deploy and not (self.deploy == message.correlation_id or self.deploy in tokens):
            return False
        if self.node and not (self.node in tokens or _body_names_node(message.body, self.node)):
            return False
        if self.type_pattern and not fnmatch.fnmatchcase(message.type, self.type_pattern):
            return False
        return not (self.message_id and (message.envelope is None or message.envelope.id != self.message_id))


def _body_names_node(body: Any, node: str) -> bool:
    return isinstance(body, dict) and body.get("node") == node


def _recorded(stream: str, msg: Any) -> RecordedMessage:
    headers = dict(msg.headers or {})
    try:
        envelope: Envelope | None = Envelope.from_headers(headers)
    except InvalidInput:
        envelope = None
    try:
        body = decode_value(msg.data, media_type(headers.get(H_CONTENT_TYPE) or None))
    except InvalidInput:
        body = {"undecodable": msg.data[:64].hex()}
    metadata = msg.metadata
    return RecordedMessage(stream, metadata.sequence.stream, msg.subject, metadata.timestamp, envelope, body)


def _start(since: datetime | None, from_sequence: int | None, live: bool) -> dict[str, Any]:
    if from_sequence is not None:
        if from_sequence < 1:
            raise InvalidInput("from_seq", f"stream sequences start at 1, got {from_sequence}")
        return {"deliver_policy": api.DeliverPolicy.BY_START_SEQUENCE, "opt_start_seq": from_sequence}
    if since is not None:
        return {"deliver_policy": api.DeliverPolicy.BY_START_TIME, "opt_start_time": since.isoformat()}
    return {"deliver_policy": api.DeliverPolicy.NEW if live else api.DeliverPolicy.ALL}


async def read_stream(
    js: JetStreamContext,
    stream: str,
    *,
    subject_filter: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    from_sequence: int | None = None,
    live: bool = False,
    idle_seconds: float = 1.0,
) -> AsyncIterator[RecordedMessage]:
    """The messages of `stream` in order; without `live` it ends at the stream's end (or at `until`)."""
    try:
        await js.stream_info(stream)
    except NotFoundError:
        raise BusError(f"stream {stream} does not exist: is this eru's NATS server, provisioned?") from None
    config = api.ConsumerConfig(
        ack_policy=api.AckPolicy.NONE,
        filter_subject=subject_filter,
        inactive_threshold=INACTIVE_SECONDS,
        mem_storage=True,
        **_start(since, from_sequence, live),
    )
    info = await js.add_consumer(stream, config=config)
    subscription = await js.pull_subscribe_bind(stream=stream, name=info.name)
    try:
        if not live and info.num_pending == 0:
            return
        while True:
            try:
                messages = await subscription.fetch(BATCH, timeout=idle_seconds)
            except TimeoutError:
                if live:
                    continue
                return
            for msg in messages:
                recorded = _recorded(stream, msg)
                if until is not None and recorded.stored_at > until:
                    return
                yield recorded
                if not live and msg.metadata.num_pending == 0:
                    return
    finally:
        with contextlib.suppress(Exception):
            await subscription.unsubscribe()
        with contextlib.suppress(Exception):
            await js.delete_consumer(stream, info.name)


async def read_history(
    js: JetStreamContext,
    streams: Sequence[str] = STORY_STREAMS,
    selection: Selection = Selection(),
    *,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[RecordedMessage]:
    """The selected messages of several streams, merged in the order they were stored (time, then stream/seq)."""
    found: list[RecordedMessage] = []
    for stream in streams:
        with contextlib.suppress(BusError):
            async for message in read_stream(js, stream, since=since, until=until):
                if selection.matches(message):
                    found.append(message)
    found.sort(key=lambda m: (m.stored_at, m.stream, m.sequence))
    return found
