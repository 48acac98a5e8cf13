"""The containers' rows as the allocator's verbs outside a deploy read and change them: health reports, the
containers of silent nodes, where a container runs and a workload's live instances (a lifecycle verb locks its
containers through the operations capability, `store.operation_store`; docs/allocator.md "The store seam"). Typed
rows, never positional tuples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from eru.store.container_events import HealthReport, SilentContainer
from eru.store.queries import ContainerPlace
from eru.store.transaction import Connection

HEALTH_SQL = """
UPDATE containers AS c SET health = u.health, health_at = now()
  FROM unnest($1::text[], $2::text[], $3::text[]) AS u (id, node, health)
 WHERE c.id = u.id AND c.node = u.node AND c.health IS DISTINCT FROM u.health
   AND c.state IN ('planned', 'creating', 'running', 'paused', 'updating', 'stopping')
"""
# Acknowledged containers only: a container still planned or creating on a silent node fails by its own timeout
# (`events.fail_overdue`); a pending replacement goes with its predecessor.
DOWN_SQL = """
SELECT c.id, c.node, c.deploy_id, extract(epoch FROM now() - s.heartbeat_at)::float8 AS silent
  FROM node_status s JOIN containers c ON c.node = s.name
 WHERE s.heartbeat_at <= now() - make_interval(secs => $1)
   AND c.state IN ('running', 'paused', 'updating', 'stopping') AND c.replaces IS NULL
 ORDER BY c.id LIMIT 1000
"""
PLACE_SQL = """
SELECT c.id, c.node, c.state,
       s.heartbeat_at IS NOT NULL AND s.heartbeat_at <= now() - make_interval(secs => $2) AS silent,
       extract(epoch FROM now() - s.heartbeat_at)::float8 AS silent_for
  FROM containers c LEFT JOIN node_status s ON s.name = c.node
 WHERE c.id = $1
"""
LIVE_OF_WORKLOAD_SQL = """
SELECT id, tenant FROM containers
 WHERE workload = $1 AND ($2::text IS NULL OR pod = $2) AND state NOT IN ('removed', 'failed', 'lost')
 ORDER BY id
"""


@dataclass(frozen=True)
class ContainerOwner:
    """A container and the tenant it belongs to."""

    id: str
    tenant: str


async def record_health(pool: asyncpg.Pool, reports: Sequence[HealthReport]) -> None:
    """Write each reported health onto its live container's row (on the node that reported it)."""
    if not reports:
        return
    await pool.execute(
        HEALTH_SQL,
        [report.container_id for report in reports],
        [report.node for report in reports],
        [report.health for report in reports],
    )


async def on_silent_nodes(pool: asyncpg.Pool, ttl_seconds: float) -> list[SilentContainer]:
    """Up to 1,000 acknowledged, live containers of nodes without a heartbeat for `ttl_seconds`, by id."""
    rows = await pool.fetch(DOWN_SQL, float(ttl_seconds))
    return [SilentContainer(row["id"], row["node"], row["deploy_id"], float(row["silent"])) for row in rows]


async def place_of(pool: asyncpg.Pool, container_id: str, down_after_seconds: float) -> ContainerPlace | None:
    """Where `container_id` runs, its node silent after `down_after_seconds`; None when the id is unknown."""
    async with pool.acquire() as conn:
        row = await conn.fetchrow(PLACE_SQL, container_id, float(down_after_seconds))
    if row is None:
        return None
    silent_for = row["silent_for"]
    return ContainerPlace(
        row["id"], row["node"], row["state"], bool(row["silent"]), None if silent_for is None else float(silent_for)
    )


async def live_of_workload(conn: Connection, workload: str, pod: str | None) -> list[ContainerOwner]:
    """The live containers of `workload` (in `pod`, any pod when None), by id."""
    rows = await conn.fetch(LIVE_OF_WORKLOAD_SQL, workload, pod)
    return [ContainerOwner(row["id"], row["tenant"]) for row in rows]
