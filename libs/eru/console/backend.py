"""The console's reads: the same bus queries as the CLI (`eru.allocator.query`, `tenant-ls`, `$SRV.STATS`, stream
history), shaped by `eru.console.views`. The console keeps no record of its own (docs/console.md)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from pydantic import BaseModel

from eru.bus import request
from eru.bus.discovery import discover_services
from eru.bus.history import STORY_STREAMS, Selection, read_history
from eru.bus.streams import DLQ
from eru.bus.subjects import allocator_operation
from eru.console import views
from eru.console.feed import Feed
from eru.decision_view import explain_deploy_decision, explain_eviction_event
from eru.domain.messages import OperationReply, QueryRequest
from eru.domain.tenants import TenantListRequest
from eru.errors import InvalidInput
from eru.replay import RecordedDecision, recorded_eviction, replay

NODES_TTL_SECONDS = 1.0
SERVICES = ("allocator", "distributor", "node-agent", "eviction")


class Backend:
    """Reads for the pages, over one NATS connection (`nc`); `feed` holds what arrived live."""

    def __init__(self, nc: Client, feed: Feed, *, state_dir: Path | None = None, timeout: float = 5.0) -> None:
        self.nc = nc
        self.feed = feed
        self.state_dir = state_dir
        self.timeout = timeout
        self._nodes: tuple[float, list[dict[str, Any]]] | None = None
        self._nodes_lock = asyncio.Lock()

    async def _ask(self, name: str, model: BaseModel) -> OperationReply:
        return await request(self.nc, allocator_operation(name), model, OperationReply, self.timeout, source="console")

    async def query(self, what: str, **fields: Any) -> list[dict[str, Any]]:
        """Every row of `eru.allocator.query` (what `eru node ls`, `eru deploy status` … read), following the pages
        (docs/bus.md, paging); a deploy's containers are merged into its one row."""
        request = QueryRequest(what=what, **fields)
        reply = await self._ask("query", request)
        rows = [dict(row) for row in reply.rows]
        cursor = reply.next_cursor
        while cursor is not None:
            page = await self._ask("query", request.model_copy(update={"cursor": cursor}))
            if what == "deploy" and rows and page.rows:
                rows[0]["containers"] = [*rows[0]["containers"], *page.rows[0]["containers"]]
            else:
                rows.extend(dict(row) for row in page.rows)
            cursor = page.next_cursor
        return rows

    async def node_rows(self) -> list[dict[str, Any]]:
        """Every node row, cached for `NODES_TTL_SECONDS` (many browsers, one query)."""
        async with self._nodes_lock:
            now = time.monotonic()
            if self._nodes is None or now - self._nodes[0] > NODES_TTL_SECONDS or self.feed.nodes_dirty:
                self.feed.nodes_dirty = False
                self._nodes = (now, await self.query("nodes"))
            return self._nodes[1]

    async def cluster(self, text: str, offset: int, limit: int) -> dict[str, Any]:
        """A page of node cards matching the filter box, with the totals for the pager."""
        rows = await self.node_rows()
        matched = [row for row in rows if views.matches(row, text)] if text.strip() else rows
        shown, offset = views.page(matched, offset, limit)
        containers = await asyncio.gather(*(self.query("containers", node=row["name"]) for row in shown))
        cards = []
        for row, own in zip(shown, containers, strict=True):
            card = views.node_card(self.feed.with_condition(row), own, self.feed.usage.get(row["name"]))
            cards.append(card)
        states: dict[str, int] = {}
        for row in rows:
            key = "cordoned" if row.get("cordoned") else str(row.get("state", ""))
            states[key] = states.get(key, 0) + 1
        return {
            "total": len(rows),
            "matched": len(matched),
            "offset": offset,
            "limit": limit,
            "states": states,
            "cards": cards,
        }

    async def deploys(self, limit: int, cursor: str | None = None) -> dict[str, Any]:
        """One page of deploys, newest first, with their progress, and the cursor of the next (older) page
        (docs/bus.md, paging)."""
        reply = await self._ask("query", QueryRequest(what="deploys", limit=limit, cursor=cursor))
        return {"deploys": [views.deploy_progress(row) for row in reply.rows], "next_cursor": reply.next_cursor}

    async def deploy(self, deploy_id: str) -> dict[str, Any]:
        """One deploy: its request, containers, explained decision and recorded events."""
        row = (await self.query("deploy", deploy_id=deploy_id))[0]
        deploy = row["deploy"]
        decision_id = (deploy.get("result") or {}).get("decision_id")
        decision: dict[str, Any] | None = None
        if decision_id:
            recorded = (await self.query("decision", decision_id=decision_id))[0]
            decision = {
                "id": recorded["id"],
                "kind": recorded["kind"],
                "created_at": recorded.get("created_at"),
                **explain_deploy_decision(recorded.get("input") or {}, recorded.get("output") or {}),
            }
        since = _parse_time(deploy.get("created_at"))
        story = await read_history(
            self.nc.jetstream(),
            STORY_STREAMS,
            Selection(deploy=deploy["id"]),
            since=None if since is None else since - timedelta(seconds=5),
        )
        events = [
            {
                "time": message.stored_at.isoformat(),
                "subject": message.subject,
                "type": message.type,
                "source": message.envelope.source if message.envelope else "",
                "body": _short(message.body),
            }
            for message in story[-500:]
        ]
        return {"deploy": deploy, "containers": row["containers"], "decision": decision, "events": events}

    async def replay(self, decision_id: str) -> dict[str, Any]:
        """Re-run a recorded decision (allocation from the allocator's record, eviction from the live feed)."""
        body = self.feed.eviction_bodies.get(decision_id)
        if body is not None:
            recorded = recorded_eviction(body)
        else:
            row = (await self.query("decision", decision_id=decision_id))[0]
            recorded = RecordedDecision(row["id"], row["kind"], row.get("input") or {}, row.get("output") or {})
        outcome = replay(recorded)
        return {
            "decision_id": outcome.decision_id,
            "kind": outcome.kind,
            "same": outcome.same,
            "differences": outcome.differences[:100],
        }

    async def explain(self, decision_id: str) -> dict[str, Any]:
        """Why an eviction decision of the feed (the last hour, then live) chose what it chose: the same explanation
        as `eru explain <id>` (`eru.decision_view.explain_eviction_event`)."""
        body = self.feed.eviction_bodies.get(decision_id)
        if body is None:
            raise InvalidInput(
                "decision_id",
                f"unknown eviction decision {decision_id!r} (the console keeps the last hour; `eru explain` reads "
                "the whole stream)",
            )
        return {"decision_id": decision_id, **explain_eviction_event(body)}

    async def tenants(self, pod: str | None) -> dict[str, Any]:
        """`tenant-ls`: weights, quotas, limits, holdings, dominant shares, waiting requests."""
        request = TenantListRequest(pod=pod)
        reply = await self._ask("tenant-ls", request)
        rows = list(reply.rows)
        cursor = reply.next_cursor
        while cursor is not None:  # every page: the page shows the whole tree (docs/bus.md, paging)
            page = await self._ask("tenant-ls", request.model_copy(update={"cursor": cursor}))
            rows.extend(page.rows)
            cursor = page.next_cursor
        return {"message": reply.message, "warnings": reply.warnings, "rows": rows}

    async def services(self) -> dict[str, Any]:
        """Replicas by `$SRV.STATS`, each durable consumer's backlog and health (`eru.bus.consumer_health`, as
        `eru status`), dead letters from ERU_DLQ, restarts and /metrics URLs when the stack records them."""
        from eru.bus.consumer_health import gather

        replicas = await discover_services(self.nc, wait_seconds=0.5)
        js = self.nc.jetstream()
        consumers: list[dict[str, Any]] | None
        try:
            consumers = await asyncio.wait_for(gather(js), timeout=10)
        except Exception:  # an account without JetStream rights still sees the replicas
            consumers = None
        dead_letters: dict[str, Any] | None
        try:
            info = await js.stream_info(DLQ, subjects_filter=">")
            dead_letters = {"total": int(info.state.messages), "subjects": dict(info.state.subjects or {})}
        except Exception:  # no dead-letter stream: shown as not reported
            dead_letters = None
        restarts, metrics = self._stack_facts()
        return {
            "services": views.service_rows(replicas, SERVICES, restarts, metrics, consumers),
            "consumers": consumers,
            "dead_letters": dead_letters,
            "restarts_reported": restarts is not None,
        }

    def _stack_facts(self) -> tuple[dict[str, int] | None, dict[str, str]]:
        """Restart counts (None until the supervisor records them) and /metrics URLs from the stack's stack.json."""
        if self.state_dir is None:
            return None, {}
        from eru.stack.info import StackInfo

        try:
            info = StackInfo.load(self.state_dir)
        except (OSError, TypeError, ValueError):
            return None, {}
        if info is None:
            return None, {}
        counts = getattr(info, "restarts", None)
        restarts = {str(k): int(v) for k, v in counts.items()} if isinstance(counts, Mapping) else None
        return restarts, {str(k): str(v) for k, v in (getattr(info, "metrics", None) or {}).items()}


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _short(body: Any, limit: int = 4000) -> Any:
    """A body for the events list: whole unless huge (then its keys and a note)."""
    import json

    text = json.dumps(body, default=str)
    if len(text) <= limit:
        return body
    if isinstance(body, Mapping):
        return {"truncated": f"{len(text)} characters", "keys": sorted(str(k) for k in body)}
    return {"truncated": f"{len(text)} characters"}


def check_limit(value: str | None, default: int, field: str, maximum: int = 500) -> int:
    """A positive integer query parameter, or `InvalidInput` naming it."""
    if value is None or value == "":
        return default
    if not value.isdigit() or not 0 < int(value) <= maximum:
        raise InvalidInput(field, f"expected a whole number from 1 to {maximum}, got {value!r}")
    return int(value)
