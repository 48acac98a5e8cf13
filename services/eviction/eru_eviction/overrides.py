"""Live watermark overrides for the eviction replicas (docs/colocation.md "Watermarks set live").

Each change arrives on `eru.watermarks.<scope>.<name>` (the allocator's outbox; core subscription, every replica)
and is applied at the node's next sample. A replica also asks the allocator for every override (`query watermarks`)
when it starts and every `condition_refresh_seconds`, so a change it missed (it was down, the allocator was away)
is applied within that period; versions keep a late resync from undoing a newer change.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog
from nats.aio.client import Client

from eru.bus import decode, request
from eru.bus.codec import media_type
from eru.bus.envelope import H_CONTENT_TYPE
from eru.bus.subjects import WATERMARKS_ALL, allocator_operation
from eru.domain.messages import OperationReply, QueryRequest, WatermarkOverride
from eru.errors import InvalidInput
from eru_eviction.handlers import ConfigResolver

log = structlog.get_logger()
RESYNC_TIMEOUT_SECONDS = 5.0


class OverrideSync:
    """Keeps a `ConfigResolver`'s overrides current: live messages, and a resync every `period` seconds."""

    def __init__(self, nc: Client, resolver: ConfigResolver, period: float, source: str) -> None:
        self.nc = nc
        self.resolver = resolver
        self.period = period
        self.source = source
        self.synced_at: float | None = None
        self.subscription: Any = None
        self._task: asyncio.Task[bool] | None = None

    async def start(self) -> None:
        """Subscribe to the changes (before the first resync, so nothing falls between the two)."""
        self.subscription = await self.nc.subscribe(WATERMARKS_ALL, cb=self.on_message)

    async def on_message(self, msg: Any) -> None:
        """One changed override; a bad body is logged and dropped (never raises)."""
        headers = msg.headers or {}
        try:
            override = decode(msg.data, WatermarkOverride, media_type(headers.get(H_CONTENT_TYPE)))
        except InvalidInput as error:
            log.error("eviction.watermarks.rejected", subject=msg.subject, field=error.field, reason=error.reason)
            return
        if self.resolver.apply(override):
            log.info("eviction.watermarks.applied", scope=override.scope, name=override.name, version=override.version)

    async def resync(self, now: float | None = None) -> bool:
        """Ask the allocator for every override when `period` has passed since the last resync; never raises."""
        now = time.monotonic() if now is None else now
        if self.synced_at is not None and now - self.synced_at < self.period:
            return False
        try:
            reply = await request(
                self.nc,
                allocator_operation("query"),
                QueryRequest(what="watermarks"),
                OperationReply,
                RESYNC_TIMEOUT_SECONDS,
                source=self.source,
            )
            for row in reply.rows:
                self.resolver.apply(WatermarkOverride.model_validate(row))
        except Exception as error:  # the allocator away or older: keep what we have, try again next round
            log.warning("eviction.watermarks.resync_failed", error=str(error) or type(error).__name__)
            return False
        self.synced_at = now
        return True

    def poke(self) -> None:
        """Resync in the background when due (a slow allocator never holds up the lease loop)."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self.resync())

    async def stop(self) -> None:
        """Unsubscribe, stop a resync under way."""
        if self._task is not None:
            self._task.cancel()
        if self.subscription is not None:
            await self.subscription.unsubscribe()
