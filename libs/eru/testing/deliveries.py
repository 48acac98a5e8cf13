"""A `Delivery` as a consumer hands it to its handler, for tests that call a handler directly (no server)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from eru.bus.delivery import Delivery
from eru.bus.replies import H_REPLY_TO


def delivery(
    subject: str,
    *,
    stream: str,
    consumer: str,
    deliveries: int = 1,
    stream_sequence: int = 1,
    headers: Mapping[str, str] | None = None,
) -> Delivery:
    """The `deliveries`-th delivery of a msgpack message on `subject` from `stream` to `consumer`, now; its reply
    subject is the `H_REPLY_TO` header's, if any."""
    fields = dict(headers or {})
    return Delivery(
        subject=subject,
        stream=stream,
        consumer=consumer,
        stream_sequence=stream_sequence,
        deliveries=deliveries,
        pending=0,
        timestamp=datetime.now(UTC),
        headers=fields,
        content_type="application/msgpack",
        reply_to=fields.get(H_REPLY_TO),
    )
