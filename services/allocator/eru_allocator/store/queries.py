"""Read-only queries of operators' views (`eru.allocator.query`): workloads grouped from their containers, the
images a workload has run, the newest deploys with their containers counted by state, and one recorded decision
(docs/allocator.md "The store seam"). Typed rows (eru.store.queries); the views shape them for the reply.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from eru.store.queries import DeployView, ImageRun, RecordedDecisionRow, WorkloadGroup
from eru.store.transaction import Connection

WORKLOADS_SQL = """
SELECT pod, tenant, workload, array_agg(DISTINCT image ORDER BY image) AS images, array_agg(state) AS states,
       count(DISTINCT deploy_id) AS deploys,
       count(*) FILTER (WHERE state = 'running' AND health = 'unhealthy') AS unhealthy,
       count(*) FILTER (WHERE state = 'running' AND health = 'starting') AS starting
  FROM containers
 WHERE ($1::text IS NULL OR pod = $1) AND ($2 OR state NOT IN ('removed', 'failed', 'lost'))
   AND ($3::text IS NULL OR split_part(tenant, '/', 1) = $3)
   AND ($4::text IS NULL OR (pod, tenant, workload) > ($4, $5, $6))
 GROUP BY pod, tenant, workload
 ORDER BY pod, tenant, workload
 LIMIT $7
"""
HISTORY_SQL = """
WITH runs AS (
    SELECT image, created_at, updated_at AS last_at, state FROM containers
     WHERE workload = $1 AND ($2::text IS NULL OR pod = $2)
       AND ($3::text IS NULL OR split_part(tenant, '/', 1) = $3)
    UNION ALL
    SELECT record->>'image', (record->>'created_at')::timestamptz, finished_at, state FROM containers_history
     WHERE record->>'workload' = $1 AND ($2::text IS NULL OR pod = $2)
       AND ($3::text IS NULL OR split_part(record->>'tenant', '/', 1) = $3)
)
SELECT image, min(created_at) AS first_at, max(last_at) AS last_at, count(*) AS instances,
       count(*) FILTER (WHERE state NOT IN ('removed', 'failed', 'lost')) AS live
  FROM runs GROUP BY image ORDER BY min(created_at), image
"""
DEPLOYS_SQL = """
SELECT d.id, d.request_id, d.pod, d.tenant, d.status, d.created_at, d.updated_at,
       d.result->>'decision_id' AS decision_id, d.request->'workload'->>'name' AS workload,
       d.request->'workload'->>'image' AS image, d.request->'workload'->>'priority_class' AS class,
       COALESCE((d.request->>'count')::int, 0) AS count, d.result->'error'->>'message' AS error,
       COALESCE(c.states, '{}'::jsonb) AS states
  FROM deploys d
  LEFT JOIN LATERAL (
       SELECT jsonb_object_agg(s.state, s.n) AS states
         FROM (SELECT state, count(*) AS n FROM containers WHERE deploy_id = d.id GROUP BY state) s
  ) c ON true
 WHERE ($1::text IS NULL OR d.pod = $1)
   AND ($3::timestamptz IS NULL OR (d.created_at, d.id) < ($3, $4))
   AND ($5::text IS NULL OR split_part(d.tenant, '/', 1) = $5)
 ORDER BY d.created_at DESC, d.id DESC
 LIMIT $2
"""
DECISION_SQL = "SELECT id, kind, input, output, created_at FROM decisions WHERE id = $1"


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


async def workload_groups(
    conn: Connection,
    pod: str | None,
    include_gone: bool,
    tenant: str | None,
    after: tuple[str, str, str] | None,
    limit: int,
) -> list[WorkloadGroup]:
    """Up to `limit` workloads after `after` (pod, tenant, name), in that order; gone instances counted when
    `include_gone`; `tenant`: only that tenant's and its groups'."""
    rows = await conn.fetch(WORKLOADS_SQL, pod, include_gone, tenant, *(after or (None, None, None)), limit)
    return [
        WorkloadGroup(
            pod=row["pod"],
            tenant=row["tenant"],
            workload=row["workload"],
            images=list(row["images"]),
            states=list(row["states"]),
            deploys=int(row["deploys"]),
            unhealthy=int(row["unhealthy"]),
            starting=int(row["starting"]),
        )
        for row in rows
    ]


async def image_runs(conn: Connection, workload: str, pod: str | None, tenant: str | None) -> list[ImageRun]:
    """The images `workload` ran, live containers and those moved to history, oldest first."""
    rows = await conn.fetch(HISTORY_SQL, workload, pod, tenant)
    return [
        ImageRun(row["image"], row["first_at"], row["last_at"], int(row["instances"]), int(row["live"])) for row in rows
    ]


async def deploy_views(
    conn: Connection, pod: str | None, limit: int, before: tuple[datetime, str] | None, tenant: str | None
) -> list[DeployView]:
    """The newest `limit` deploys (of `pod`, or all; of `tenant` and its groups, or every tenant's) older than
    `before` (creation time, id), newest first."""
    rows = await conn.fetch(DEPLOYS_SQL, pod, limit, *(before or (None, None)), tenant)
    return [
        DeployView(
            id=row["id"],
            request_id=row["request_id"],
            pod=row["pod"],
            tenant=row["tenant"],
            status=row["status"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            decision_id=row["decision_id"],
            workload=row["workload"],
            image=row["image"],
            priority_class=row["class"],
            count=int(row["count"]),
            error=row["error"],
            states={str(state): int(n) for state, n in (_json(row["states"]) or {}).items()},
        )
        for row in rows
    ]


async def recorded_decision(conn: Connection, decision_id: str) -> RecordedDecisionRow | None:
    """The decision `decision_id` as recorded; None when there is no such row (unknown, or dropped by retention)."""
    row = await conn.fetchrow(DECISION_SQL, decision_id)
    if row is None:
        return None
    return RecordedDecisionRow(row["id"], row["kind"], _json(row["input"]), _json(row["output"]), row["created_at"])
