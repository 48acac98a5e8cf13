"""The images a workload has run (`eru workload history NAME`): its live containers and those retention moved to
`containers_history`, one row per image, oldest first (docs/cli.md "Rolling replace")."""

from __future__ import annotations

from typing import Any

from eru.errors import InvalidInput
from eru.store.transaction import Connection

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


async def workload_history(
    conn: Connection, workload: str | None, pod: str | None, tenant: str | None
) -> list[dict[str, Any]]:
    """One row per image the workload ran: `image`, `first_at`, `last_at` (ISO 8601), `instances` (containers ever),
    `live` (containers running it now). `tenant`: only that tenant's containers (a tenant's query)."""
    if not workload:
        raise InvalidInput("workload", "needed to show a workload's history")
    rows = await conn.fetch(HISTORY_SQL, workload, pod, tenant)
    return [
        {
            "image": row["image"],
            "first_at": row["first_at"].isoformat() if row["first_at"] else None,
            "last_at": row["last_at"].isoformat() if row["last_at"] else None,
            "instances": int(row["instances"]),
            "live": int(row["live"]),
        }
        for row in rows
    ]
