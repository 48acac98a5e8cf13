"""Watermark overrides' rows (docs/colocation.md "Watermarks set live", migration 0180): a node's or a pod's
override read (locked for a change), the overrides of a pod's nodes, an override written with its next version, and
every override for a replica's resync (docs/allocator.md "The store seam"); `store.watermark_store` runs them.
"""

from __future__ import annotations

import json
from typing import Any

from eru.store.transaction import Connection
from eru.store.watermarks import NodeOverride, StoredOverride

OVERRIDE_SQL = "SELECT settings FROM watermark_overrides WHERE scope = $1 AND name = $2"
LOCK_OVERRIDE_SQL = OVERRIDE_SQL + " FOR UPDATE"
POD_NODES_SQL = """
SELECT n.name, w.settings FROM nodes n
  LEFT JOIN watermark_overrides w ON w.scope = 'node' AND w.name = n.name
 WHERE n.pod = $1 ORDER BY n.name
"""
UPSERT_SQL = """
INSERT INTO watermark_overrides AS w (scope, name, settings) VALUES ($1, $2, $3::jsonb)
ON CONFLICT (scope, name) DO UPDATE SET settings = EXCLUDED.settings, version = w.version + 1, updated_at = now()
RETURNING version
"""
ALL_SQL = "SELECT scope, name, settings, version FROM watermark_overrides ORDER BY scope, name"
NODE_POD_SQL = "SELECT pod FROM nodes WHERE name = $1"
POD_SQL = "SELECT name FROM pods WHERE name = $1"


def _settings(value: Any) -> dict[str, int]:
    raw = json.loads(value) if isinstance(value, str) else (value or {})
    return {str(k): int(v) for k, v in raw.items()}


async def override(conn: Connection, scope: str, name: str, *, lock: bool = False) -> dict[str, int]:
    """The override of `name` in `scope` (empty when there is none); `lock`: its row locked until the transaction
    ends."""
    return _settings(await conn.fetchval(LOCK_OVERRIDE_SQL if lock else OVERRIDE_SQL, scope, name))


async def pod_node_overrides(conn: Connection, pod: str) -> list[NodeOverride]:
    """Every node of `pod`, by name, with its own override."""
    rows = await conn.fetch(POD_NODES_SQL, pod)
    return [NodeOverride(row["name"], None if row["settings"] is None else _settings(row["settings"])) for row in rows]


async def put_override(conn: Connection, scope: str, name: str, settings: dict[str, int]) -> int:
    """Store `settings` as the override of `name` in `scope`; its version (1, then one more per change)."""
    return int(await conn.fetchval(UPSERT_SQL, scope, name, json.dumps(settings)))


async def all_overrides(conn: Connection) -> list[StoredOverride]:
    """Every stored override, by scope and name."""
    rows = await conn.fetch(ALL_SQL)
    return [StoredOverride(row["scope"], row["name"], _settings(row["settings"]), int(row["version"])) for row in rows]


async def pod_of(conn: Connection, scope: str, name: str) -> str | None:
    """The pod an override of `name` in `scope` belongs to: a node's pod, or the pod itself; None when unknown."""
    found = await conn.fetchval(NODE_POD_SQL if scope == "node" else POD_SQL, name)
    return None if found is None else str(found)


__all__ = [
    "NodeOverride",
    "StoredOverride",
    "all_overrides",
    "override",
    "pod_node_overrides",
    "pod_of",
    "put_override",
]
