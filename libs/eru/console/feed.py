"""The console's live feed: core subscriptions to the bus's events, fanned out to every browser as server-sent
events (docs/console.md). Bodies are read with the bus codec; a message that does not decode is skipped, never
fatal. Metrics samples are folded into one `usage` message per second (1,000 nodes every 5 s stay 1 message/s)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import OrderedDict, deque
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from eru.bus.codec import decode_value, media_type
from eru.bus.envelope import H_CONTENT_TYPE
from eru.console import views
from eru.errors import InvalidInput

log = structlog.get_logger()

SUBJECTS = ("eru.node.*.condition", "eru.eviction.*", "eru.container.*.*", "eru.deploy.*.*", "eru.metrics.*")
QUEUE_SIZE = 1000
KEPT_EVICTIONS = 500
USAGE_FLUSH_SECONDS = 1.0


class Feed:
    """What arrived live (newest conditions, usage, evictions) and the browsers listening."""

    def __init__(self) -> None:
        self.listeners: set[asyncio.Queue[tuple[str, str]]] = set()
        self.conditions: dict[str, dict[str, Any]] = {}
        self.usage: dict[str, dict[str, Any]] = {}
        self.evictions: deque[dict[str, Any]] = deque(maxlen=KEPT_EVICTIONS)
        self.eviction_bodies: OrderedDict[str, Mapping[str, Any]] = OrderedDict()
        self.nodes_dirty = False
        self.closed = False
        self._changed_usage: dict[str, dict[str, Any]] = {}
        self._subscriptions: list[Any] = []
        self._flusher: asyncio.Task[None] | None = None

    async def start(self, nc: Any) -> None:
        """Subscribe to the live subjects and start the usage flusher; read back the last hour of evictions."""
        for subject in SUBJECTS:
            self._subscriptions.append(await nc.subscribe(subject, cb=self._on_message))
        self._flusher = asyncio.create_task(self._flush_usage())
        await self._load_evictions(nc)

    async def stop(self) -> None:
        """Unsubscribe and stop the flusher; the browsers' streams end."""
        self.closed = True
        for subscription in self._subscriptions:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher

    def listen(self) -> asyncio.Queue[tuple[str, str]]:
        """A queue of (event, JSON data) for one browser; `forget` it when the browser leaves."""
        queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue(QUEUE_SIZE)
        self.listeners.add(queue)
        return queue

    def forget(self, queue: asyncio.Queue[tuple[str, str]]) -> None:
        """Stop sending to a browser."""
        self.listeners.discard(queue)

    def broadcast(self, event: str, data: Mapping[str, Any]) -> None:
        """Send to every browser; a browser too slow to keep up gets `resync` (reload its data) instead."""
        text = json.dumps(data, default=str)
        for queue in list(self.listeners):
            try:
                queue.put_nowait((event, text))
            except asyncio.QueueFull:
                with contextlib.suppress(asyncio.QueueEmpty):
                    while True:
                        queue.get_nowait()
                queue.put_nowait(("resync", "{}"))

    def with_condition(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """A node row with the newest condition seen live, if newer than the allocator's copy."""
        live = self.conditions.get(str(row.get("name")))
        stored = row.get("conditions") or {}
        if live is not None and float(live.get("time") or 0) >= float(stored.get("time") or 0):
            return {**row, "conditions": live}
        return dict(row)

    async def _on_message(self, msg: Any) -> None:
        try:
            body = decode_value(msg.data, media_type((msg.headers or {}).get(H_CONTENT_TYPE) or None))
        except InvalidInput:
            return
        if not isinstance(body, dict):
            return
        tokens = msg.subject.split(".")
        try:
            self._route(tokens, body)
        except (KeyError, TypeError, ValueError) as error:  # a foreign body of the right subject: skip it
            log.info("console.feed.skipped", subject=msg.subject, reason=str(error))

    def _route(self, tokens: list[str], body: dict[str, Any]) -> None:
        kind = tokens[1]
        if kind == "metrics":
            self._on_metrics(tokens[2], body)
        elif kind == "node" and tokens[-1] == "condition":
            self.conditions[tokens[2]] = body
            self.broadcast("condition", {"node": tokens[2], "condition": body})
        elif kind == "eviction":
            self._on_eviction(body, live=True)
        elif kind == "container":
            events = body.get("events") if tokens[3] == "batch" else [body]
            self.nodes_dirty = True
            for event in events or []:
                self.broadcast(
                    "container",
                    {
                        "node": tokens[2],
                        "container_id": event.get("container_id"),
                        "kind": event.get("kind"),
                        "deploy_id": event.get("deploy_id"),
                    },
                )
        elif kind == "deploy" and tokens[2] != "request":
            self.broadcast("deploy", {"deploy_id": tokens[2], "kind": tokens[3]})

    def _on_metrics(self, node: str, body: dict[str, Any]) -> None:
        capacity = float(body.get("cpu_capacity") or 0)
        total = int(body.get("memory_total") or 0)
        usage = {
            "time": body.get("time"),
            "cpu_used": body.get("cpu_used"),
            "cpu_percent": round(100 * float(body.get("cpu_used") or 0) / capacity, 1) if capacity else None,
            "memory_used": body.get("memory_used"),
            "memory_percent": round(100 * int(body.get("memory_used") or 0) / total, 1) if total else None,
        }
        self.usage[node] = usage
        self._changed_usage[node] = usage

    def _on_eviction(self, body: Mapping[str, Any], *, live: bool) -> None:
        summary = views.eviction_summary(body)
        decision_id = str(summary["decision_id"])
        if decision_id in self.eviction_bodies:
            return
        self.eviction_bodies[decision_id] = body
        while len(self.eviction_bodies) > KEPT_EVICTIONS:
            self.eviction_bodies.popitem(last=False)
        self.evictions.appendleft(summary)
        if live:
            self.broadcast("eviction", summary)

    async def _flush_usage(self) -> None:
        while True:
            await asyncio.sleep(USAGE_FLUSH_SECONDS)
            if self._changed_usage and self.listeners:
                self.broadcast("usage", self._changed_usage)
            self._changed_usage = {}

    async def _load_evictions(self, nc: Any) -> None:
        from eru.bus.history import read_stream
        from eru.bus.streams import EVENTS

        since = datetime.now(UTC) - timedelta(hours=1)
        try:
            async for message in read_stream(nc.jetstream(), EVENTS, subject_filter="eru.eviction.*", since=since):
                if isinstance(message.body, Mapping):
                    self._on_eviction(message.body, live=False)
        except Exception as error:  # history is a convenience; the live feed works without it
            log.warning("console.evictions.history_unavailable", reason=str(error))
