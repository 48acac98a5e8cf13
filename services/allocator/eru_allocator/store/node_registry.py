"""What node agents and operators change about nodes and pods (docs/planning.md, docs/store.md "Node status"):
registrations and `set-node` upsert `nodes` rows, heartbeats and conditions go to `node_status` (never the `nodes`
row a deploy holds for its transaction), cordon flags, operator labels, pods created on first use, and the node
listing of `eru node ls`. `eru_allocator.nodes.registry` validates and decides; these write and read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

import asyncpg

from eru.store.nodes import ConditionChange, NodeCapacity, NodeRecord
from eru.store.queries import NodeListing
from eru.store.transaction import Connection
from eru_allocator.store import sql

ENSURE_POD_SQL = "INSERT INTO pods (name) VALUES ($1) ON CONFLICT (name) DO NOTHING"
UPSERT_NODE_SQL = """
INSERT INTO nodes (name, pod, cpu_map, memory, numa, numa_memory, share_base, labels, state)
VALUES ($1, $2, $3::jsonb, $4, $5::jsonb, $6::jsonb, $7, $8::jsonb, 'up')
ON CONFLICT (name) DO UPDATE SET
    pod = CASE WHEN $9 THEN nodes.pod ELSE EXCLUDED.pod END,
    cpu_map = EXCLUDED.cpu_map, memory = EXCLUDED.memory, numa = EXCLUDED.numa,
    numa_memory = EXCLUDED.numa_memory, share_base = EXCLUDED.share_base, labels = EXCLUDED.labels, state = 'up',
    version = nodes.version + 1
"""
# Heartbeats and conditions live in `node_status` (migration 0115), never in the `nodes` row a deploy holds for its
# whole transaction: they never wait on a deploy (docs/store.md "Node status"). A batch is one statement; its rows
# are written in name order, so two replicas' batches never deadlock; only known nodes are written.
HEARTBEATS_SQL = """
INSERT INTO node_status AS s (name, heartbeat_at)
SELECT n.name, now() FROM nodes n WHERE n.name = ANY($1::text[]) ORDER BY n.name
ON CONFLICT (name) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at
RETURNING s.name
"""
# the newest condition of each node wins (watermarks); one arriving late, older than the stored one, is ignored
CONDITIONS_SQL = """
WITH incoming AS (
    SELECT DISTINCT ON (u.name) u.name, u.conditions::jsonb AS conditions, u.time
      FROM unnest($1::text[], $2::text[], $3::float8[]) AS u (name, conditions, time)
     ORDER BY u.name, u.time DESC
), before AS (
    SELECT s.name, s.conditions FROM node_status s WHERE s.name IN (SELECT name FROM incoming)
), written AS (
    INSERT INTO node_status AS s (name, conditions)
    SELECT i.name, i.conditions FROM incoming i JOIN nodes n ON n.name = i.name ORDER BY i.name
    ON CONFLICT (name) DO UPDATE SET conditions = EXCLUDED.conditions
     WHERE s.conditions->>'time' IS NULL OR (s.conditions->>'time')::float8 <= (EXCLUDED.conditions->>'time')::float8
    RETURNING s.name
)
SELECT w.name, n.pod, coalesce(b.conditions, '{}'::jsonb) AS before, i.conditions AS after
  FROM written w JOIN nodes n ON n.name = w.name JOIN incoming i ON i.name = w.name
  LEFT JOIN before b ON b.name = w.name
"""
REGISTERED_BEAT_SQL = """
INSERT INTO node_status (name, heartbeat_at) VALUES ($1, now())
ON CONFLICT (name) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at
"""
CURRENT_PODS_SQL = "SELECT name, pod FROM nodes WHERE name = ANY($1::text[])"
WAKE_ADMISSION_SQL = "SELECT pg_notify('eru_admission', $1) WHERE EXISTS (SELECT 1 FROM deploy_waits WHERE pod = $1)"
OPERATOR_LABELS_SQL = "UPDATE nodes SET operator_labels = $2::jsonb, version = version + 1 WHERE name = $1"
NODE_TO_CHANGE_SQL = f"SELECT {sql.NODE_COLUMNS}, operator_labels FROM {sql.NODES_WITH_STATUS} WHERE name = $1"
LIVE_ON_NODE_SQL = "SELECT count(*) FROM containers WHERE node = $1 AND state NOT IN ('removed', 'failed', 'lost')"
CORDON_SQL = "UPDATE nodes SET cordoned = $2 WHERE name = $1"
NODE_LISTING_SQL = f"""
SELECT {sql.NODE_COLUMNS}, operator_labels,
       (SELECT count(*) FROM containers c WHERE c.node = n.name
          AND c.state NOT IN ('removed', 'failed', 'lost')) AS containers,
       heartbeat_at IS NOT NULL AND heartbeat_at <= now() - make_interval(secs => $3) AS silent,
       (SELECT coalesce(sum(r.cpu), 0)::float8 FROM tenant_reservations r
         WHERE r.node = n.name) AS reserved_cpu,
       (SELECT coalesce(sum(r.memory), 0)::bigint FROM tenant_reservations r
         WHERE r.node = n.name) AS reserved_memory,
       (SELECT coalesce(string_agg(r.tenant, ',' ORDER BY r.tenant), '') FROM tenant_reservations r
         WHERE r.node = n.name) AS reserved_for,
       (SELECT coalesce(jsonb_agg(jsonb_build_array(g.resources, g.k)), '[]'::jsonb)::text
          FROM (SELECT c.resources, count(*) AS k FROM containers c WHERE c.node = n.name
                  AND c.state NOT IN ('removed', 'failed', 'lost') AND c.replaces IS NULL
                 GROUP BY c.resources) g) AS requests,
       jsonb_build_object(
           'node', (SELECT w.settings FROM watermark_overrides w
                     WHERE w.scope = 'node' AND w.name = n.name),
           'pod', (SELECT w.settings FROM watermark_overrides w
                    WHERE w.scope = 'pod' AND w.name = n.pod)) AS watermark_overrides
  FROM {sql.NODES_WITH_STATUS} WHERE ($1::text IS NULL OR pod = $1) AND ($2::text IS NULL OR name = $2)
    AND ($4::text IS NULL OR name > $4)
 ORDER BY name LIMIT $5
"""


class NodeUpsert(NamedTuple):
    """A `nodes` row to write, in `UPSERT_NODE_SQL`'s parameter order (layouts and labels JSON text);
    `keep_pod`: a known node stays in its pod (a registration), else it moves to `pod` (`set-node`)."""

    name: str
    pod: str
    cpu_map: str
    memory: int
    numa: str
    numa_memory: str
    share_base: int
    labels: str
    keep_pod: bool


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


async def current_pods(conn: Connection, names: Sequence[str]) -> dict[str, str]:
    """Node name → its pod, for the known nodes of `names`."""
    return {row["name"]: row["pod"] for row in await conn.fetch(CURRENT_PODS_SQL, list(names))}


async def ensure_pod(conn: asyncpg.Pool | Connection, pod: str) -> bool:
    """Create pod `pod` unless it exists; whether it was created."""
    status: str = await conn.execute(ENSURE_POD_SQL, pod)
    return status.endswith(" 1")


async def upsert_nodes(conn: Connection, rows: Sequence[NodeUpsert]) -> None:
    """Write the nodes' capacity and labels (state `up`, version bumped); usage is left alone."""
    await conn.executemany(UPSERT_NODE_SQL, rows)


async def upsert_capacities(conn: Connection, nodes: Sequence[NodeCapacity], *, keep_pod: bool) -> None:
    """`upsert_nodes` of typed capacities (a known node stays in its pod when `keep_pod`)."""
    await upsert_nodes(
        conn,
        [
            NodeUpsert(
                node.name,
                node.pod,
                json.dumps(dict(node.cpu_map)),
                node.memory,
                json.dumps(dict(node.numa)),
                json.dumps(dict(node.numa_memory)),
                node.share_base,
                json.dumps(dict(node.labels)),
                keep_pod,
            )
            for node in nodes
        ],
    )


async def registered(conn: Connection, names: Sequence[str]) -> None:
    """The registered nodes' heartbeat is now."""
    await conn.executemany(REGISTERED_BEAT_SQL, [(name,) for name in names])


async def write_conditions(
    pool: asyncpg.Pool, names: Sequence[str], conditions: Sequence[str], times: Sequence[float]
) -> list[ConditionChange]:
    """Keep each node's newest condition (JSON text) by its time; the nodes whose condition was written."""
    rows = await pool.fetch(CONDITIONS_SQL, list(names), list(conditions), list(times))
    return [ConditionChange(row["name"], row["pod"], _json(row["before"]) or {}, _json(row["after"])) for row in rows]


async def wake_admission_if_waiting(pool: asyncpg.Pool, pod: str) -> None:
    """Wake the admission passes of `pod` when requests wait there."""
    await pool.execute(WAKE_ADMISSION_SQL, pod)


async def heartbeats(pool: asyncpg.Pool, names: Sequence[str]) -> set[str]:
    """Mark the nodes `names` (name order) alive in one statement; the names of those known."""
    return {row["name"] for row in await pool.fetch(HEARTBEATS_SQL, list(names))}


async def node_to_change(conn: Connection, name: str) -> NodeRecord | None:
    """Node `name`: capacity, operator labels and usage; None when unknown."""
    row = await conn.fetchrow(NODE_TO_CHANGE_SQL, name)
    if row is None:
        return None
    capacity = NodeCapacity(
        row["name"],
        row["pod"],
        _json(row["cpu_map"]),
        int(row["memory"]),
        _json(row["numa"]) or {},
        _json(row["numa_memory"]) or {},
        int(row["share_base"]),
        _json(row["labels"]) or {},
    )
    return NodeRecord(
        capacity, _json(row["operator_labels"]) or {}, _json(row["used_cpu_map"]) or {}, int(row["used_memory"])
    )


async def live_on_node(conn: Connection, name: str) -> int:
    """How many containers on node `name` still hold resources."""
    return int(await conn.fetchval(LIVE_ON_NODE_SQL, name))


async def set_operator_labels(conn: Connection, name: str, labels: str) -> None:
    """Replace the node's operator labels (JSON text)."""
    await conn.execute(OPERATOR_LABELS_SQL, name, labels)


async def set_cordoned(pool: asyncpg.Pool, name: str, cordoned: bool) -> bool:
    """Cordon or uncordon node `name`; False when unknown."""
    status: str = await pool.execute(CORDON_SQL, name, cordoned)
    return status.endswith(" 1")


async def node_listing(
    conn: Connection, pod: str | None, node: str | None, down_after_seconds: float, after: str | None, limit: int | None
) -> list[NodeListing]:
    """Nodes (of `pod`, or named `node`; after the name `after`, at most `limit`) with capacity, usage, reservations,
    live containers, their requests grouped, watermark overrides, and `silent` (no heartbeat for
    `down_after_seconds`)."""
    return [
        NodeListing(
            name=row["name"],
            pod=row["pod"],
            cpu_map=_decoded(row["cpu_map"]),
            memory=int(row["memory"]),
            numa=_decoded(row["numa"]),
            numa_memory=_decoded(row["numa_memory"]),
            used_cpu_map=_decoded(row["used_cpu_map"]),
            used_memory=int(row["used_memory"]),
            used_numa_memory=_decoded(row["used_numa_memory"]),
            labels=_decoded(row["labels"]),
            state=row["state"],
            cordoned=bool(row["cordoned"]),
            share_base=int(row["share_base"]),
            heartbeat_at=row["heartbeat_at"],
            version=int(row["version"]),
            conditions=_decoded(row["conditions"]),
            operator_labels=_decoded(row["operator_labels"]),
            containers=int(row["containers"]),
            silent=bool(row["silent"]),
            reserved_cpu=float(row["reserved_cpu"]),
            reserved_memory=int(row["reserved_memory"]),
            reserved_for=row["reserved_for"],
            requests=[(resources, int(count)) for resources, count in _decoded(row["requests"])],
            watermark_overrides=_decoded(row["watermark_overrides"]),
        )
        for row in await conn.fetch(NODE_LISTING_SQL, pod, node, down_after_seconds, after, limit)
    ]


def _decoded(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value
