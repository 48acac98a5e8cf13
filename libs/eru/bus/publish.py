"""Publishing typed messages with their envelope: to JetStream (stored, deduplicated) or core NATS (fire and forget)."""

from __future__ import annotations

from typing import Any

from nats.aio.client import Client
from nats.js import JetStreamContext
from pydantic import BaseModel

from eru.bus.codec import MSGPACK, encode, encode_value, media_type
from eru.envelope import H_CONTENT_TYPE, Envelope


def message_headers(envelope: Envelope, content_type: str | None = None) -> dict[str, str]:
    """The envelope headers plus `Content-Type` (msgpack unless told otherwise)."""
    return {**envelope.to_headers(), H_CONTENT_TYPE: media_type(content_type or MSGPACK)}


async def publish(
    js: JetStreamContext,
    subject: str,
    model: BaseModel,
    envelope: Envelope,
    *,
    content_type: str | None = None,
    timeout: float | None = None,  # noqa: ASYNC109 - forwarded to the JetStream publish
) -> Any:
    """Store `model` on a JetStream subject and return the `PubAck` (`.duplicate` is true for a repeat of `ce-id`)."""
    body = encode(model, content_type)
    return await js.publish(subject, body, headers=message_headers(envelope, content_type), timeout=timeout)


async def publish_value(js: JetStreamContext, subject: str, value: Any, envelope: Envelope) -> Any:
    """Store an already wire-shaped value (what `to_wire` gives) as msgpack: for hot paths that build the plain value
    directly instead of going through a model's serializer (the node agent's metrics samples)."""
    return await js.publish(subject, encode_value(value), headers=message_headers(envelope))


async def publish_core(
    nc: Client, subject: str, model: BaseModel, envelope: Envelope, *, content_type: str | None = None
) -> None:
    """Send `model` on core NATS (not stored; only current subscribers see it)."""
    await nc.publish(subject, encode(model, content_type), headers=message_headers(envelope, content_type))
