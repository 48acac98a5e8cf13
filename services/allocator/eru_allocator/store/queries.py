"""Read-only queries of operators' views (`eru.allocator.query`): workloads grouped from their containers and the
images a workload has run (docs/allocator.md "The store seam"). Typed rows; the views shape them for the reply.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

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


@dataclass(frozen=True)
class WorkloadGroup:
    """A workload (pod, tenant, name) as its containers show it: images, every instance's state, how many deploys
    made them, and how many running instances are unhealthy or still starting their checks."""

    pod: str
    tenant: str
    workload: str
    images: list[str]
    states: list[str]
    deploys: int
    unhealthy: int
    starting: int


@dataclass(frozen=True)
class ImageRun:
    """One image a workload ran: when first and last, containers ever, containers running it now."""

    image: str
    first_at: datetime | None
    last_at: datetime | None
    instances: int
    live: int


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
