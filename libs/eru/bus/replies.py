"""Replies on the bus: a reply model or an error `{"status": "error", "code", "message", "details"}` (the shape of
`eru.domain.messages.ErrorReply`), each a core message with its own envelope caused by the request."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from eru.bus.codec import MSGPACK, encode, encode_value, media_type
from eru.bus.envelope import H_CONTENT_TYPE, Envelope, new_envelope
from eru.errors import EruError

H_REPLY_TO = "Eru-Reply-To"
H_STATUS = "Eru-Status"
ERROR_TYPE = "eru.error"


def error_body(error: EruError) -> dict[str, Any]:
    """The wire form of an error reply."""
    details = {k: v for k, v in error.details.items()}
    return {"status": "error", "code": error.code, "message": error.message, "details": details}


async def send_reply(
    nc: Any,
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
    headers = {**reply_envelope.to_headers(), H_CONTENT_TYPE: kind, **extra}
    await nc.publish(reply_subject, body, headers=headers)
