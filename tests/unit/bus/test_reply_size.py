"""A reply larger than the server's max payload is answered with `reply_too_large` instead of never arriving."""

from __future__ import annotations

from typing import Any

import msgpack

from eru.bus.requests import send_reply
from eru.domain.messages import OperationReply


class RecordingConnection:
    """Just enough of a nats-py client: the server's max payload and what was published."""

    def __init__(self, max_payload: int) -> None:
        self.max_payload = max_payload
        self.published: list[tuple[str, bytes, dict[str, str]]] = []

    async def publish(self, subject: str, body: bytes, headers: dict[str, str]) -> None:
        self.published.append((subject, body, headers))


async def _reply(rows: list[dict[str, Any]], max_payload: int) -> tuple[dict[str, Any], dict[str, str]]:
    nc = RecordingConnection(max_payload)
    await send_reply(nc, "_INBOX.x", OperationReply(rows=rows), causation=None, source="test")
    ((_subject, body, headers),) = nc.published
    return msgpack.unpackb(body), headers


async def test_a_reply_within_the_limit_goes_as_it_is() -> None:
    body, headers = await _reply([{"id": "a"}], max_payload=1 << 20)
    assert headers["Eru-Status"] == "ok"
    assert body["rows"] == [{"id": "a"}]


async def test_a_reply_over_the_limit_becomes_an_error_naming_both_sizes() -> None:
    rows = [{"id": f"c-{index}", "pad": "x" * 100} for index in range(200)]  # ≈ 25 kB
    body, headers = await _reply(rows, max_payload=16 * 1024)
    assert headers["Eru-Status"] == "error"
    assert body["code"] == "reply_too_large"
    assert body["details"]["max_payload"] == 16 * 1024 - 4096
    assert body["details"]["size"] > body["details"]["max_payload"]
