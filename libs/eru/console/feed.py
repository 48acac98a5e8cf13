"""The console's live feed: core subscriptions to the bus's events, fanned out to every browser as server-sent
events (docs/console.md). Bodies are read with the bus codec; a message that does not decode is skipped, never
fatal. Metrics samples are folded into one `usage` message per second (1,000 nodes every 5 s stay 1 message/s).

What the console keeps (conditions, usage, evictions) is read all the time; container and deploy events only while
a browser listens (docs/console.md "Live feed"): they are only passed on, and with nobody watching they cost a
console that runs beside every `eru up` ~6 % of a core at 50 deploys/s, and nats-server a copy of every event."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import OrderedDict, deque
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
from nats.aio.client import Client

from eru.bus.codec import decode_value, media_type
from eru.console import views
from eru.envelope import H_CONTENT_TYPE
from eru.errors import InvalidInput

log = structlog.get_logger()

KEPT_SUBJECTS = ("eru.node.*.condition", "eru.eviction.*", "eru.metrics.*")  # state the console keeps
# passed on to browsers: read while one listens
LIVE_SUBJECTS = ("eru.container.*.*", "eru.group.*.results", "eru.deploy.*.*")
SUBJECTS = (*KEPT_SUBJECTS, *LIVE_SUBJECTS)
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
        self.closed = False
        self._nodes_dirty = False
        self._changed_usage: dict[str, dict[str, Any]] = {}
        self._nc: Client | None = None
        self._subscriptions: list[Any] = []
        self._live: list[Any] = []  # the LIVE_SUBJECTS subscriptions while a browser listens
        self._following: asyncio.Task[None] | None = None
        self._flusher: asyncio.Task[None] | None = None

    @property
    def nodes_dirty(self) -> bool:
        """Whether the node rows may have changed since they were last read: a container event came, or the
        container events are not being read (nobody listens), so nothing says they did not."""
        return self._nodes_dirty or not self._live

    @nodes_dirty.setter
    def nodes_dirty(self, value: bool) -> None:
        self._nodes_dirty = value

    @property
    def following(self) -> bool:
        """Whether the container and deploy events are being read (a browser listens)."""
        return bool(self._live)

    async def start(self, nc: Client) -> None:
        """Subscribe to what the console keeps and start the usage flusher; read back the last hour of evictions.
        Container and deploy events are subscribed to when the first browser listens."""
        self._nc = nc
        for subject in KEPT_SUBJECTS:
            self._subscriptions.append(await nc.subscribe(subject, cb=self._on_message))
        self._flusher = asyncio.create_task(self._flush_usage())
        self._follow()
        await self._load_evictions(nc)

    async def stop(self) -> None:
        """Unsubscribe and stop the flusher; the browsers' streams end."""
        self.closed = True
        for task in (self._following, self._flusher):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for subscription in [*self._subscriptions, *self._live]:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()
        self._live = []

    def listen(self) -> asyncio.Queue[tuple[str, str]]:
        """A queue of (event, JSON data) for one browser; `forget` it when the browser leaves."""
        queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue(QUEUE_SIZE)
        self.listeners.add(queue)
        self._follow()
        return queue

    def forget(self, queue: asyncio.Queue[tuple[str, str]]) -> None:
        """Stop sending to a browser."""
        self.listeners.discard(queue)
        self._follow()

    async def followed(self) -> None:
        """Return once the live subscriptions match the listeners (for tests and the server's first event)."""
        while self._following is not None and not self._following.done():
            with contextlib.suppress(Exception):  # a failed subscription is logged by the task
                await asyncio.shield(self._following)

    def _follow(self) -> None:
        """Bring the live subscriptions in line with the listeners, in the background (one task at a time)."""
        if self._nc is None or self.closed or (self._following is not None and not self._following.done()):
            return
        if bool(self.listeners) != bool(self._live):
            self._following = asyncio.create_task(self._sync_live())

    async def _sync_live(self) -> None:
        # loops: a browser may come or go while the subscriptions change
        nc = self._nc
        if nc is None:  # not started: nothing to follow yet
            return
        while not self.closed and bool(self.listeners) != bool(self._live):
            if self.listeners:
                try:
                    for subject in LIVE_SUBJECTS:
                        self._live.append(await nc.subscribe(subject, cb=self._on_message))
                    await nc.flush()  # the server has the subscriptions: what is published next arrives
                except Exception as error:  # the connection is away: the next browser to come or go tries again
                    log.warning("console.feed.follow_failed", reason=str(error) or type(error).__name__)
                    return
                self._nodes_dirty = True  # what changed while nobody listened is read afresh
            else:
                live, self._live = self._live, []
                for subscription in live:
                    with contextlib.suppress(Exception):
                        await subscription.unsubscribe()

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
        elif kind in ("container", "group"):  # a node's event or batch, or a group's results (each names its node)
            events = body.get("events") if kind == "group" or tokens[3] == "batch" else [body]
            self.nodes_dirty = True
            for event in events or []:
                self.broadcast(
                    "container",
                    {
                        "node": event.get("node", tokens[2]) if kind == "group" else tokens[2],
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

    async def _load_evictions(self, nc: Client) -> None:
        from eru.bus.history import read_stream
        from eru.bus.streams import EVENTS

        since = datetime.now(UTC) - timedelta(hours=1)
        try:
            async for message in read_stream(nc.jetstream(), EVENTS, subject_filter="eru.eviction.*", since=since):
                if isinstance(message.body, Mapping):
                    self._on_eviction(message.body, live=False)
        except Exception as error:  # history is a convenience; the live feed works without it
            log.warning("console.evictions.history_unavailable", reason=str(error))
