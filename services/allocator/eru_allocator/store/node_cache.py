"""The pod's schedulable nodes for a snapshot, parsing only the node rows that changed (docs/store.md "Node cache").

A batch's snapshot used to read and parse every node row of the pod (capacity and usage as jsonb, a `NodeResources`
each): at 1,000 nodes of 32 cores that is a few MB of text per batch, though a batch of 400 containers changes at
most 400 rows. Now a snapshot reads one narrow row per schedulable node — its name, its row version, whether its
condition forbids batch — and the full row only of the nodes whose version is not the one parsed before.

A row's version is `(xmin, version)`: `xmin` (the transaction that wrote the row version) changes with every
committed UPDATE of the row, whatever column it touched, and `version` (bumped by every usage and capacity change)
tells apart two changes made by one transaction. So a cached `NodeResources` is exactly what parsing the row now
would give, and the snapshot — what the decision record holds — is the same as without the cache
(tests/integration/pipeline/test_node_cache.py compares both after every kind of write).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from eru.planning import NodeResources
from eru.store.transaction import Connection
from eru_allocator.store import sql

Key = tuple[str, int]  # (xmin, version) of the row parsed

SCHEDULABLE_VERSIONS_SQL = f"""
SELECT name, n.xmin::text AS xmin, version,
       s.conditions->'forbid_schedule_cpu' AS forbid_cpu, s.conditions->'forbid_schedule_memory' AS forbid_memory
  FROM {sql.NODES_WITH_STATUS}
 WHERE pod = $1 AND state = 'up' AND NOT cordoned
   AND (heartbeat_at IS NULL OR heartbeat_at > now() - make_interval(secs => $2))
"""
CHANGED_NODES_SQL = """
SELECT name, xmin::text AS xmin, version, cpu_map, memory, numa, numa_memory, used_cpu_map, used_memory,
       used_numa_memory
  FROM nodes WHERE name = ANY($1::text[])
"""


class NodeCache:
    """Parsed node rows of one allocator process, by node name, each with the row version it was parsed from."""

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[Key, NodeResources]] = {}
        self.parsed = 0  # rows parsed since start (a figure for tests and the scale bench)
        self.reused = 0  # rows served from the cache

    async def schedulable(
        self, conn: Connection, pod: str, down_after_seconds: float
    ) -> tuple[list[NodeResources], frozenset[str]]:
        """`sql.schedulable_nodes`, parsing only what changed since the last call."""
        rows = await conn.fetch(SCHEDULABLE_VERSIONS_SQL, pod, float(down_after_seconds))
        wanted: dict[str, Key] = {row["name"]: (row["xmin"], int(row["version"])) for row in rows}
        stale = [name for name, key in wanted.items() if self._key(name) != key]
        if stale:
            for name in stale:
                self._nodes.pop(name, None)  # a row deleted between the two reads is left out, never served old
            for row in await conn.fetch(CHANGED_NODES_SQL, stale):
                self._nodes[row["name"]] = ((row["xmin"], int(row["version"])), sql.node_resources(row))
            self.parsed += len(stale)
        self.reused += len(wanted) - len(stale)
        nodes = [self._nodes[name][1] for name in sorted(wanted) if name in self._nodes]
        forbidden = frozenset(row["name"] for row in rows if _forbids(row))
        return nodes, forbidden

    def known(self) -> tuple[list[str], list[str], list[int]]:
        """The rows parsed so far as three arrays (names, xmins, versions): `eru_open_deploy_batch` sends every
        column only of the rows whose version is not among them."""
        names = list(self._nodes)
        keys = [self._nodes[name][0] for name in names]
        return names, [key[0] for key in keys], [key[1] for key in keys]

    async def from_rows(self, conn: Connection, rows: Sequence[Any]) -> tuple[list[NodeResources], frozenset[str]]:
        """`schedulable` from `eru_open_deploy_batch`'s `node` rows (docs/store.md "A deploy batch's reads"): the
        rows sent whole are parsed; a row sent narrow whose version the cache no longer holds (another session of
        this process changed it between `known` and now) is read again, never served old."""
        wanted: dict[str, Key] = {}
        missing: list[str] = []
        for row in rows:
            name, key = row["name"], (row["t1"], int(row["n1"]))
            wanted[name] = key
            if row["t2"] == "full":
                self._nodes[name] = (key, sql.node_resources(_whole(row)))
                self.parsed += 1
            elif self._key(name) != key:
                self._nodes.pop(name, None)
                missing.append(name)
            else:
                self.reused += 1
        if missing:
            for row in await conn.fetch(CHANGED_NODES_SQL, missing):
                self._nodes[row["name"]] = ((row["xmin"], int(row["version"])), sql.node_resources(row))
            self.parsed += len(missing)
        nodes = [self._nodes[name][1] for name in sorted(wanted) if name in self._nodes]
        forbidden = frozenset(
            row["name"]
            for row in rows
            if sql.forbids_batch(
                {"forbid_schedule_cpu": _loads(row["j1"]), "forbid_schedule_memory": _loads(row["j2"])}
            )
        )
        return nodes, forbidden

    def _key(self, name: str) -> Key | None:
        cached = self._nodes.get(name)
        return cached[0] if cached is not None else None


def _whole(row: Any) -> dict[str, Any]:
    """A `node` row of `eru_open_deploy_batch` sent whole, under the node table's column names."""
    return {
        "name": row["name"],
        "cpu_map": row["j3"],
        "memory": row["n2"],
        "numa": row["j4"],
        "numa_memory": row["j5"],
        "used_cpu_map": row["j6"],
        "used_memory": row["n3"],
        "used_numa_memory": row["j7"],
    }


def _forbids(row: Any) -> bool:
    return sql.forbids_batch(
        {"forbid_schedule_cpu": _loads(row["forbid_cpu"]), "forbid_schedule_memory": _loads(row["forbid_memory"])}
    )


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value
