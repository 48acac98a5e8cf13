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

A deploy batch reads less still (`since` / `from_changes`, migration 0220, docs/store.md "Node changes"): only the
node rows written since its last read of the pod, by the row's `changed_xid` and the read's horizon; the pod's other
nodes are the ones kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
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


@dataclass
class _PodView:
    """One pod's nodes as of `horizon` (docs/store.md "Node changes"): every node row of the pod, parsed, in name
    order; `recheck` names rows last read while their writer (the reading transaction) had not committed."""

    horizon: str | None = None
    members: dict[str, NodeResources] = field(default_factory=dict)
    ordered: list[NodeResources] | None = None  # members by name; None: to sort again (a member came or went)
    index: dict[str, int] = field(default_factory=dict)
    recheck: set[str] = field(default_factory=set)


class NodeCache:
    """Parsed node rows of one allocator process, by node name, each with the row version it was parsed from."""

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[Key, NodeResources]] = {}
        self._views: dict[str, _PodView] = {}  # per pod: the nodes kept up to date by `from_changes`
        self._shapes: dict[Any, Any] = {}  # capacity maps by their text (`sql.node_resources`)
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

    def since(self, pod: str) -> tuple[str | None, list[str]]:
        """What `eru_open_deploy_batch_changes` needs to send only what changed: the horizon of the pod's last read
        (None: every row of the pod) and the rows to read again whatever their writer."""
        view = self._views.get(pod)
        if view is None:
            return None, []
        return view.horizon, sorted(view.recheck)

    def from_changes(self, pod: str, parts: dict[str, list[Any]]) -> tuple[list[NodeResources], frozenset[str]]:
        """`schedulable` from `eru_open_deploy_batch_changes`'s rows (migrations 0220, 0230): the changed rows
        (`node`) applied to the pod's kept nodes, less the pod's nodes left out now (`left_out`, from
        `eru_nodes_left_out` in the same read); the nodes whose condition forbids batch (`watermark`). The rows
        must be those of a read that passed `since(pod)`, under the pod's lock (reads of one pod are applied in
        the order they were made)."""
        view = self._views.setdefault(pod, _PodView())
        parsed = 0
        for row in parts.get("node", ()):
            name = row["name"]
            if row["t3"] == "own":
                view.recheck.add(name)  # the reading transaction's own write: gone if it rolls back
            else:
                view.recheck.discard(name)
            if row["t2"] != pod:  # another pod's row: a member no more if it moved
                if view.members.pop(name, None) is not None:
                    view.ordered = None
                continue
            node = sql.node_resources(_whole(row), self._shapes)
            self._nodes[name] = ((row["t1"], int(row["n1"])), node)
            parsed += 1
            if view.ordered is not None and name in view.members:
                view.ordered[view.index[name]] = node
            else:
                view.ordered = None
            view.members[name] = node
        horizon = parts["horizon"][0]["t1"]
        if view.horizon is None or int(horizon) > int(view.horizon):
            view.horizon = horizon
        if view.ordered is None:
            view.ordered = [view.members[name] for name in sorted(view.members)]
            view.index = {node.name: at for at, node in enumerate(view.ordered)}
        # the nodes left out and those whose condition forbids batch: eru_nodes_left_out's rows (migration 0230)
        skip = {row["name"] for row in parts.get("left_out", ())}
        nodes = [node for node in view.ordered if node.name not in skip] if skip else list(view.ordered)
        forbidden = frozenset(
            row["name"] for row in parts.get("watermark", ()) if row["name"] in view.members and row["name"] not in skip
        )
        self.parsed += parsed
        self.reused += len(view.members) - parsed
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
