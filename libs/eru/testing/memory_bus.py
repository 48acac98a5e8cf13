"""`InMemoryBus`: the `eru.bus.protocol.Bus` for unit tests and the simulator (docs/architecture.md "The decision and
its seams"), shipped with eru like structlog's `testing` module. Requests go to handlers registered per subject
(`serve`); published messages are kept in `published`. `serve_placement(bus)` answers `eru.distributor.place` as
the distributor does, with the same pure placement modes.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from eru.bus.codec import MSGPACK, decode_value, encode_value
from eru.bus.codec import validate as validate_model
from eru.bus.errors import NoResponders
from eru.bus.protocol import Bus, Reply
from eru.bus.replies import error_body
from eru.bus.subjects import DISTRIBUTOR_PLACE, DISTRIBUTOR_PLACE_BATCH
from eru.domain import PlaceBatchRequest, PlaceRequest
from eru.envelope import H_CONTENT_TYPE
from eru.errors import EruError
from eru.planning.distribute import decide, decide_many


@dataclass(frozen=True, slots=True)
class Message:
    """A message as sent: subject, body, headers."""

    subject: str
    data: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


Handler = Callable[[Message], bytes | Awaitable[bytes]]
"""A request handler: the request → the reply body (sync or async)."""


class InMemoryBus:
    """A `Bus` in memory: `serve(subject, handler)` answers requests, `published` records what was published, and
    `requests` every request sent."""

    def __init__(self) -> None:
        self.handlers: dict[str, Handler] = {}
        self.published: list[Message] = []
        self.requests: list[Message] = []

    def serve(self, subject: str, handler: Handler) -> None:
        """Answer requests on `subject` with `handler` (replacing an earlier one)."""
        self.handlers[subject] = handler

    async def request(
        self, subject: str, payload: bytes, *, reply_within: float, headers: Mapping[str, str] | None = None
    ) -> Reply:
        """The handler's reply; `NoResponders` when nothing serves `subject`."""
        message = Message(subject, payload, dict(headers or {}))
        self.requests.append(message)
        handler = self.handlers.get(subject)
        if handler is None:
            raise NoResponders(f"nobody serves {subject}", subject=subject)
        answer = handler(message)
        body = await answer if inspect.isawaitable(answer) else answer
        return Reply(body, {H_CONTENT_TYPE: MSGPACK})

    async def publish(self, subject: str, payload: bytes, *, headers: Mapping[str, str] | None = None) -> None:
        """Record the message."""
        self.published.append(Message(subject, payload, dict(headers or {})))


def place_reply(message: Message) -> bytes:
    """The distributor's answer to a `PlaceRequest` (msgpack): the mode's placements, or the error body."""
    try:
        request = validate_model(decode_value(message.data, MSGPACK), PlaceRequest)
        reply = decide(request)  # the distributor's own function (slots or columns)
    except EruError as error:
        return encode_value(error_body(error), MSGPACK)
    return encode_value(reply.model_dump(mode="json"), MSGPACK)


def place_batch_reply(message: Message) -> bytes:
    """The distributor's answer to a `PlaceBatchRequest` (msgpack): one outcome per ask (`eru.planning.distribute`)."""
    try:
        batch = validate_model(decode_value(message.data, MSGPACK), PlaceBatchRequest)
    except EruError as error:
        return encode_value(error_body(error), MSGPACK)
    return encode_value(decide_many(batch).model_dump(mode="json"), MSGPACK)


def serve_placement(bus: InMemoryBus) -> None:
    """Let `bus` answer `eru.distributor.place` and `eru.distributor.place_batch` like the distributor service."""
    bus.serve(DISTRIBUTOR_PLACE, place_reply)
    bus.serve(DISTRIBUTOR_PLACE_BATCH, place_batch_reply)


def _conforms(bus: InMemoryBus) -> Bus:
    """Where mypy checks that `InMemoryBus` is a `Bus`."""
    return bus


__all__ = ["Handler", "InMemoryBus", "Message", "place_batch_reply", "place_reply", "serve_placement"]
