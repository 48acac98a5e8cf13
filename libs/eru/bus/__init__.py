"""eru's bus over NATS JetStream: connection, envelope + codec, subjects, streams, consumers, request/reply.

See docs/bus.md for subjects, streams, retention, the envelope and the delivery semantics.
"""

from eru.bus.codec import JSON, MSGPACK, decode, encode
from eru.bus.connection import connect
from eru.bus.consumer import Consumer, ConsumerOptions, Delivery, consume, ensure_consumer
from eru.bus.errors import (
    BusError,
    BusUnavailable,
    NoResponders,
    Permanent,
    RemoteError,
    RequestTimeout,
    Retryable,
)
from eru.bus.publish import publish, publish_core
from eru.bus.replies import send_reply
from eru.bus.requests import Server, reply_to_delivery, request, serve
from eru.bus.streams import StreamSpec, default_streams, ensure_stream, provision_streams
from eru.envelope import Envelope, new_envelope, new_id

__all__ = [
    "JSON",
    "MSGPACK",
    "BusError",
    "BusUnavailable",
    "Consumer",
    "ConsumerOptions",
    "Delivery",
    "Envelope",
    "NoResponders",
    "Permanent",
    "RemoteError",
    "RequestTimeout",
    "Retryable",
    "Server",
    "StreamSpec",
    "connect",
    "consume",
    "decode",
    "default_streams",
    "encode",
    "ensure_consumer",
    "ensure_stream",
    "new_envelope",
    "new_id",
    "provision_streams",
    "publish",
    "publish_core",
    "reply_to_delivery",
    "request",
    "send_reply",
    "serve",
]
