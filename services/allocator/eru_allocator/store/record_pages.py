"""Pages of the record for `eru.allocator.query` (docs/bus.md, paging): pods with their node counts, containers in
(node, creation time, id) order, one deploy by id or request key, and what retention moved to history
(eru.store.retention). Typed rows (eru.store.queries); `PgQueries` (store.query_store) runs them.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from eru.store.queries import ContainerFilter, ContainerRecord, DeployRecord, PodCount
from eru.store.transaction import Connection
from eru_allocator.store.container_ops import CONTAINER_COLUMNS, container_record

PODS_SQL = """
SELECT p.name, p.created_at, count(n.name) AS nodes, count(n.name) FILTER (WHERE n.cordoned) AS cordoned
  FROM pods p LEFT JOIN nodes n ON n.pod = p.name
 WHERE ($1::text IS NULL OR p.name > $1)
 GROUP BY p.name ORDER BY p.name LIMIT $2
"""
DEPLOY_SQL = "SELECT * FROM deploys WHERE id = $1 OR request_id = $1"
DEPLOY_HISTORY_SQL = "SELECT record FROM deploys_history WHERE id = $1 OR request_id = $1 LIMIT 1"
CONTAINERS_HISTORY_SQL = "SELECT record FROM containers_history WHERE deploy_id = $1 ORDER BY finished_at, id LIMIT $2"
CONTAINERS_SQL = f"""
SELECT {CONTAINER_COLUMNS} FROM containers
 WHERE ($1::text IS NULL OR pod = $1) AND ($2::text IS NULL OR node = $2)
   AND ($3::text IS NULL OR deploy_id = $3) AND ($4::text IS NULL OR id = $4)
   AND ($5 OR state NOT IN ('removed', 'failed', 'lost'))
   AND ($7::text IS NULL OR (node, created_at, id) > ($7, $8, $9))
   AND ($10::text IS NULL OR split_part(tenant, '/', 1) = $10)
 ORDER BY node, created_at, id LIMIT $6
"""


async def pod_page(conn: Connection, after: str | None, limit: int) -> list[PodCount]:
    """Up to `limit` pods after the name `after`, in name order, with their nodes and cordoned nodes counted."""
    return [
        PodCount(row["name"], row["created_at"], int(row["nodes"]), int(row["cordoned"]))
        for row in await conn.fetch(PODS_SQL, after, limit)
    ]


def _text(value: Any) -> Any:
    return value if value is None or isinstance(value, str) else json.dumps(value)


async def deploy_row(conn: Connection, key: str) -> DeployRecord | None:
    """The live deploy whose id or request key is `key`, None when there is none."""
    row = await conn.fetchrow(DEPLOY_SQL, key)
    if row is None:
        return None
    return DeployRecord(
        row["id"],
        row["request_id"],
        row["pod"],
        row["tenant"],
        row["status"],
        _text(row["request"]),
        _text(row["result"]),
        row["created_at"],
        row["updated_at"],
    )


async def deploy_history_record(conn: Connection, key: str) -> str | None:
    """The JSON record of the deploy moved to history whose id or request key is `key`."""
    record: str | None = await conn.fetchval(DEPLOY_HISTORY_SQL, key)
    return record


async def container_history_records(conn: Connection, deploy_id: str, limit: int) -> list[str]:
    """Up to `limit` JSON records of the deploy's containers moved to history, in the order they finished."""
    return [row["record"] for row in await conn.fetch(CONTAINERS_HISTORY_SQL, deploy_id, limit)]


async def container_page(
    conn: Connection, which: ContainerFilter, after: tuple[str, datetime, str] | None, limit: int
) -> list[ContainerRecord]:
    """Up to `limit` containers of `which` after the (node, created_at, id) `after`, in that order."""
    rows = await conn.fetch(
        CONTAINERS_SQL,
        which.pod,
        which.node,
        which.deploy_id,
        which.container_id,
        which.include_gone,
        limit,
        *(after if after else (None, None, None)),
        which.tenant,
    )
    return [container_record(row) for row in rows]
