"""Kept instances' rows (docs/colocation.md, the keeper of `eru_allocator.containers.keep_count`): the keeper's
lock, evictions recorded, instances of `keep` deploys adopted, and the instances gone, due for a replacement or being
placed, each read locked (FOR UPDATE) and moved on (docs/allocator.md "The store seam"). Typed rows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from eru.domain import DeployRequest
from eru.store.kept import DueInstance, GoneInstance, PlacingInstance
from eru.store.transaction import Connection

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


def _times(value: Any) -> list[float]:
    loaded = json.loads(value) if isinstance(value, str) else value
    return [float(t) for t in loaded or []]


async def try_lock_keeper(conn: Connection) -> bool:
    """Take the keeper's lock for the transaction, unless another replica holds it."""
    return bool(await conn.fetchval(LOCK_SQL))


async def database_now(conn: Connection) -> float:
    """The transaction's time (epoch seconds)."""
    return float(await conn.fetchval(NOW_SQL))


async def record_evictions(conn: Connection, mark: str, within_seconds: float) -> None:
    """Record the batch containers removed with `mark` in their reason within `within_seconds` as evictions."""
    await conn.execute(RECORD_EVICTIONS_SQL, mark, within_seconds)


async def adopt(conn: Connection) -> None:
    """Keep every first instance of a `keep` deploy not kept yet."""
    await conn.execute(ADOPT_SQL)


async def gone(conn: Connection) -> list[GoneInstance]:
    """Running kept instances whose container is gone, locked."""
    return [
        GoneInstance(
            row["lineage"],
            row["deploy_id"],
            row["workload"],
            _times(row["evictions"]),
            row["container_id"],
            row["state"],
            row["reason"],
            float(row["at"]),
        )
        for row in await conn.fetch(GONE_SQL)
    ]


async def due(conn: Connection, now: float) -> list[DueInstance]:
    """Up to 100 waiting kept instances due by `now`, soonest first, locked."""
    return [
        DueInstance(
            row["lineage"],
            row["deploy_id"],
            _times(row["evictions"]),
            int(row["generation"]),
            DeployRequest.model_validate(
                json.loads(row["request"]) if isinstance(row["request"], str) else row["request"]
            ),
        )
        for row in await conn.fetch(DUE_SQL, now)
    ]


async def placing(conn: Connection) -> list[PlacingInstance]:
    """Kept instances whose replacement was requested, locked."""
    return [
        PlacingInstance(
            row["lineage"],
            row["deploy_id"],
            row["request_id"],
            _times(row["evictions"]),
            row["status"],
            row["container_id"],
        )
        for row in await conn.fetch(PLACING_SQL)
    ]


async def move(
    conn: Connection,
    lineage: str,
    state: str,
    due_at: float | None,
    evictions: Sequence[float],
    *,
    container_id: str | None = None,
    request_id: str | None = None,
    next_generation: bool = False,
) -> None:
    """Move a kept instance to `state` (due at `due_at`) with its evictions; a new container or request id when
    given; one generation further when `next_generation`."""
    await conn.execute(
        SET_SQL, lineage, state, due_at, json.dumps(list(evictions)), container_id, request_id, int(next_generation)
    )
