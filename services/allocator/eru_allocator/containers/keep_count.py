"""Workloads that keep their count (docs/colocation.md "Batch workloads keep their count"; a service deployed with
`keep` too: its instances lost with a down node are placed again, docs/node-agent.md "Health and node TTL").

Every `keep_interval_seconds` one allocator replica (a transaction-scoped advisory lock) runs one round:

1. records the evictions of batch containers (removed by an eviction decision) in `evictions` — the input of the
   eviction memory every later batch placement reads;
2. adopts the containers of kept deploys (`keep: true`) as logical instances (`kept_instances`);
3. for an instance whose container is gone: evicted → waits `30 s × 2^k` (k = its evictions within the hour,
   capped) or, at the maximum, gives up; failed (lost) → waits the base delay; removed otherwise (someone removed
   it) → no longer kept;
4. an instance whose wait is over is placed again by a new deploy request (`keep-<lineage>-<generation>`, count 1,
   through the outbox to `eru.deploy.request`): the ordinary allocator path, its own recorded, replayable decision;
5. a re-placement that got its container runs again; one that failed waits again.

Each step is announced as a `DeployEvent` of kind `keep` (carrying a `KeepEvent`) on
`eru.deploy.<kept deploy>.keep`. The delays are the pure
`eru.colocation.backoff` functions over the recorded times; `now` is PostgreSQL's clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

import asyncpg
import structlog

from eru import telemetry
from eru.activity import ACTIVITY
from eru.bus import new_envelope
from eru.bus.subjects import DEPLOY_REQUEST, deploy_event
from eru.colocation.backoff import KeepConfig, gives_up, replacement_delay
from eru.colocation.budget import parse_budget
from eru.domain import DeployEvent, DeployRequest
from eru.domain.messages import KeepEvent
from eru.errors import InvalidInput
from eru.store import transaction
from eru.store.transaction import Connection
from eru_allocator.delivery.outbox import queue_many

log = structlog.get_logger()

EVICTED_MARK = " eviction (decision "  # the reason the eviction service gives its evict commands
LOCK_SQL = "SELECT pg_try_advisory_xact_lock(hashtext('eru-keeper'))"
NOW_SQL = "SELECT extract(epoch FROM now())::float8"
RECORD_EVICTIONS_SQL = """
INSERT INTO evictions (container_id, pod, workload, node, lineage, at)
SELECT c.id, c.pod, c.workload, c.node, coalesce(k.lineage, c.id), extract(epoch FROM c.updated_at)
  FROM containers c LEFT JOIN kept_instances k ON k.container_id = c.id
 WHERE c.class = 'batch' AND c.state = 'removed' AND c.reason LIKE '%' || $1 || '%'
   AND c.updated_at > now() - make_interval(secs => $2)
ON CONFLICT (container_id) DO NOTHING
"""
ADOPT_SQL = """
INSERT INTO kept_instances (lineage, deploy_id, pod, workload, container_id, state)
SELECT c.id, c.deploy_id, c.pod, c.workload, c.id, 'running'
  FROM containers c JOIN deploys d ON d.id = c.deploy_id
 WHERE d.request->>'keep' = 'true' AND c.replaces IS NULL
   AND NOT EXISTS (SELECT 1 FROM kept_instances k WHERE k.container_id = c.id)
ON CONFLICT (lineage) DO NOTHING
"""
GONE_SQL = """
SELECT k.lineage, k.deploy_id, k.workload, k.evictions, c.id AS container_id, c.state, c.reason,
       extract(epoch FROM c.updated_at)::float8 AS at
  FROM kept_instances k JOIN containers c ON c.id = k.container_id
 WHERE k.state = 'running' AND c.state IN ('removed', 'failed', 'lost')
 FOR UPDATE OF k
"""
DUE_SQL = """
SELECT k.lineage, k.deploy_id, k.evictions, k.generation, d.request
  FROM kept_instances k JOIN deploys d ON d.id = k.deploy_id
 WHERE k.state = 'waiting' AND k.due_at <= $1
 ORDER BY k.due_at LIMIT 100
 FOR UPDATE OF k
"""
PLACING_SQL = """
SELECT k.lineage, k.deploy_id, k.request_id, k.evictions, d.status,
       (SELECT c.id FROM containers c WHERE c.deploy_id = d.id ORDER BY c.created_at LIMIT 1) AS container_id
  FROM kept_instances k LEFT JOIN deploys d ON d.request_id = k.request_id
 WHERE k.state = 'placing'
 FOR UPDATE OF k
"""
SET_SQL = """
UPDATE kept_instances SET state = $2, due_at = $3, evictions = $4::jsonb, container_id = coalesce($5, container_id),
       request_id = coalesce($6, request_id), generation = generation + $7
 WHERE lineage = $1
"""


def check_keep(request: DeployRequest, batch: bool) -> None:
    """`eviction_budget` is for batch workloads (`keep` is for any: a service's instances lost with their node are
    placed again too), and the budget must parse (`InvalidInput` naming the field, e.g.
    `workload.eviction_budget.max_unavailable`)."""
    budget = request.workload.eviction_budget
    if budget:
        if not batch:
            raise InvalidInput("workload.eviction_budget", "only batch workloads are evicted: set priority_class batch")
        parse_budget(budget, "workload.eviction_budget")


def _times(value: Any) -> list[float]:
    loaded = json.loads(value) if isinstance(value, str) else value
    return [float(t) for t in loaded or []]


class Keeper:
    """One allocator replica's keeper; `run` until stopped, `round` once (tests)."""

    def __init__(self, pool: asyncpg.Pool, source: str, config: KeepConfig, *, wait_seconds: float = 600.0) -> None:
        self.pool = pool
        self.source = source
        self.config = config
        self.wait_seconds = wait_seconds

    async def run(self, stopping: asyncio.Event, interval: float, active: Callable[[], bool] | None = None) -> None:
        """A round every `interval` seconds while `active()` says so (the allocator: the lead replica, so three
        replicas do not run three rounds per interval: docs/replicas.md "One replica relays"); a failing round is
        logged and retried, never fatal."""
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), interval)
            if stopping.is_set():
                return
            if active is not None and not active():
                continue
            try:
                await self.round()
            except Exception as error:
                log.warning("keeper.round_failed", error=f"{type(error).__name__}: {error}")

    async def round(self) -> bool:
        """One round (False when another replica holds the keeper's lock)."""
        async with transaction(self.pool) as conn:
            if not await conn.fetchval(LOCK_SQL):
                return False
            now = float(await conn.fetchval(NOW_SQL))
            await conn.execute(RECORD_EVICTIONS_SQL, EVICTED_MARK, self.config.avoid_decay_seconds)
            await conn.execute(ADOPT_SQL)
            messages: list[tuple[str, Any, Any]] = []
            await self._gone(conn, now, messages)
            await self._placing(conn, now, messages)
            await self._due(conn, now, messages)
            await queue_many(conn, messages)
        return True

    def _event(self, messages: list[tuple[str, Any, Any]], event: KeepEvent) -> None:
        envelope = new_envelope("eru.deploy.keep", self.source, correlation_id=event.deploy_id)
        wrapped = DeployEvent(deploy_id=event.deploy_id, kind="keep", keep=event)
        messages.append((deploy_event(event.deploy_id, "keep"), wrapped, envelope))
        ACTIVITY.count(f"keeper.{event.kind}")
        log.debug("keeper.event", deploy_id=event.deploy_id, lineage=event.lineage, kind=event.kind)

    async def _gone(self, conn: Connection, now: float, messages: list[tuple[str, Any, Any]]) -> None:
        for row in await conn.fetch(GONE_SQL):
            times = _times(row["evictions"])
            lineage, deploy_id = row["lineage"], row["deploy_id"]
            reason = row["reason"] or row["state"]
            if row["state"] == "removed" and EVICTED_MARK in f" {reason}":
                at = float(row["at"])
                times.append(at)
                if gives_up(times, self.config):
                    await conn.execute(SET_SQL, lineage, "gave_up", None, json.dumps(times), None, None, 0)
                    telemetry.COLOCATION_GIVE_UPS.labels(row["workload"]).inc()
                    self._event(
                        messages,
                        KeepEvent(
                            deploy_id=deploy_id,
                            lineage=lineage,
                            kind="gave_up",
                            container_id=row["container_id"],
                            evictions=len(times),
                            reason=f"evicted {len(times)} times (maximum {self.config.max_evictions})",
                        ),
                    )
                    continue
                delay = replacement_delay(times, at, self.config)
                kind = "evicted"
            elif row["state"] in ("failed", "lost"):  # lost: its node no longer ran it (docs/operations.md)
                delay, kind = self.config.replace_base_seconds, "lost"
            else:
                await conn.execute(SET_SQL, lineage, "done", None, json.dumps(times), None, None, 0)
                continue
            due = max(now, float(row["at"])) + delay if kind == "lost" else float(row["at"]) + delay
            await conn.execute(SET_SQL, lineage, "waiting", due, json.dumps(times), None, None, 0)
            self._event(
                messages,
                KeepEvent(
                    deploy_id=deploy_id,
                    lineage=lineage,
                    kind=kind,
                    container_id=row["container_id"],
                    evictions=len(times),
                    due_in_seconds=round(max(0.0, due - now), 3),
                    reason=reason,
                ),
            )

    async def _due(self, conn: Connection, now: float, messages: list[tuple[str, Any, Any]]) -> None:
        for row in await conn.fetch(DUE_SQL, now):
            kept = DeployRequest.model_validate(
                json.loads(row["request"]) if isinstance(row["request"], str) else row["request"]
            )
            times = _times(row["evictions"])
            generation = int(row["generation"]) + 1
            request_id = f"keep-{row['lineage']}-{generation}"
            request = kept.model_copy(
                update={
                    "request_id": request_id,
                    "count": 1,
                    "keep": False,
                    "desired": kept.desired or kept.count,
                    "evictions": len(times),
                    "wait_seconds": max(kept.wait_seconds, self.wait_seconds),
                }
            )
            envelope = new_envelope("eru.deploy.request", self.source, correlation_id=row["deploy_id"])
            messages.append((DEPLOY_REQUEST, request, envelope))
            await conn.execute(SET_SQL, row["lineage"], "placing", None, json.dumps(times), None, request_id, 1)
            telemetry.COLOCATION_REPLACEMENTS.labels(kept.workload.name).inc()
            self._event(
                messages,
                KeepEvent(
                    deploy_id=row["deploy_id"],
                    lineage=row["lineage"],
                    kind="replacing",
                    evictions=len(times),
                    request_id=request_id,
                ),
            )

    async def _placing(self, conn: Connection, now: float, messages: list[tuple[str, Any, Any]]) -> None:
        for row in await conn.fetch(PLACING_SQL):
            times = _times(row["evictions"])
            if row["container_id"] is not None:
                await conn.execute(
                    SET_SQL, row["lineage"], "running", None, json.dumps(times), row["container_id"], None, 0
                )
                self._event(
                    messages,
                    KeepEvent(
                        deploy_id=row["deploy_id"],
                        lineage=row["lineage"],
                        kind="placed",
                        container_id=row["container_id"],
                        evictions=len(times),
                        request_id=row["request_id"],
                    ),
                )
            elif row["status"] == "failed":
                due = now + self.config.replace_base_seconds
                await conn.execute(SET_SQL, row["lineage"], "waiting", due, json.dumps(times), None, None, 0)
