"""Replies on the bus: a reply model or an error `{"status": "error", "code", "message", "details"}` (the shape of
`eru.domain.messages.ErrorReply`), each a core message with its own envelope caused by the request."""

from __future__ import annotations

from typing import Any

from nats.aio.client import Client
from pydantic import BaseModel

from eru.bus.codec import MSGPACK, encode, encode_value, media_type
from eru.envelope import H_CONTENT_TYPE, Envelope, new_envelope
from eru.errors import EruError

H_REPLY_TO = "Eru-Reply-To"
H_STATUS = "Eru-Status"
ERROR_TYPE = "eru.error"


def error_body(error: EruError) -> dict[str, Any]:
    """The wire form of an error reply."""
    details = {k: v for k, v in error.details.items()}
    return {"status": "error", "code": error.code, "message": error.message, "details": details}


async def send_reply(
    nc: Client,
    reply_subject: str,
    answer: BaseModel | EruError,
    *,
    causation: Envelope | None,
    source: str,
    content_type: str | None = None,
) -> None:
    """Send a reply (a model or an error) to `reply_subject`, as a core message with its own envelope."""
    kind = media_type(content_type or MSGPACK)
    if isinstance(answer, EruError):
        body = encode_value(error_body(answer), kind)
        reply_envelope = new_envelope(ERROR_TYPE, source, causation=causation)
        extra = {H_STATUS: "error"}
    else:
        body = encode(answer, kind)
        reply_envelope = new_envelope(type(answer).__name__, source, causation=causation)
        extra = {H_STATUS: "ok"}
        limit = max_payload(nc) - HEADER_ROOM
        if len(body) > limit:
            # The server would refuse it and the requester would wait for nothing: answer why instead.
            too_large = EruError(
                f"the answer ({len(body)} bytes) exceeds the bus's max payload ({limit} bytes); ask for less "
                "(a smaller page, a filter)",
                code="reply_too_large",
                size=len(body),
                max_payload=limit,
            )
            body = encode_value(error_body(too_large), kind)
            reply_envelope = new_envelope(ERROR_TYPE, source, causation=causation)
            extra = {H_STATUS: "error"}
    headers = {**reply_envelope.to_headers(), H_CONTENT_TYPE: kind, **extra}
    await nc.publish(reply_subject, body, headers=headers)


HEADER_ROOM = 4096  # the envelope's headers travel in the same message as the body


def max_payload(nc: Client) -> int:
    """The largest message the connected server accepts (nats-server's default, 1 MiB, when unknown)."""
    limit = getattr(nc, "max_payload", None)
    return limit if isinstance(limit, int) and limit > 0 else 1024 * 1024
