"""The bus seam (docs/architecture.md "Seams"), like httpx's transport: a service's decision path asks a `Bus` and
never sees nats-py. `NatsBus` adapts a nats-py client and maps its errors to eru's own (`NoResponders`,
`RequestTimeout`) at the seam; `eru.testing.memory_bus.InMemoryBus` serves unit tests and the simulator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from nats.aio.client import Client
from nats.errors import NoRespondersError as NatsNoResponders
from nats.errors import TimeoutError as NatsTimeout

from eru.bus.errors import NoResponders, RequestTimeout


@dataclass(frozen=True, slots=True)
class Reply:
    """A reply: its body and headers."""

    data: bytes
    headers: Mapping[str, str]


class Bus(Protocol):
    """Request/reply and plain publishing."""

    async def request(
        self, subject: str, payload: bytes, *, reply_within: float, headers: Mapping[str, str] | None = None
    ) -> Reply:
        """Send a request and wait for one reply; `NoResponders` when nobody serves `subject`, `RequestTimeout`
        when no reply comes within `reply_within` seconds."""

    async def publish(self, subject: str, payload: bytes, *, headers: Mapping[str, str] | None = None) -> None:
        """Publish a core message (no reply)."""


class NatsBus:
    """`Bus` over a connected nats-py client (request/reply through its shared reply subscription)."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc

    async def request(
        self, subject: str, payload: bytes, *, reply_within: float, headers: Mapping[str, str] | None = None
    ) -> Reply:
        """See `Bus.request`."""
        try:
            msg = await self.nc.request(subject, payload, timeout=reply_within, headers=dict(headers or {}))
        except NatsNoResponders:
            raise NoResponders(f"nobody serves {subject}", subject=subject) from None
        except (NatsTimeout, TimeoutError):
            raise RequestTimeout(f"no reply from {subject} within {reply_within:g}s", subject=subject) from None
        return Reply(msg.data, msg.headers or {})

    async def publish(self, subject: str, payload: bytes, *, headers: Mapping[str, str] | None = None) -> None:
        """See `Bus.publish`."""
        await self.nc.publish(subject, payload, headers=dict(headers or {}))


__all__ = ["Bus", "NatsBus", "Reply"]
