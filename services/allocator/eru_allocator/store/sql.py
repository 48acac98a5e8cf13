"""SQL of the allocator: node snapshots, relative usage changes, deploys, containers and decisions.

jsonb travels as JSON text (docs/store.md). Node usage is only ever changed relatively (`eru_map_add`, migration
0002), under the row lock of the UPDATE, so a concurrent release can never be overwritten by a stale snapshot.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from eru.planning import NodeResources
from eru.planning.left_out import NodeState, Watermark, condition_marks
from eru.store.protocol import Usage
from eru.store.transaction import Connection

NODE_COLUMNS = (
    "name, pod, cpu_map, memory, numa, numa_memory, used_cpu_map, used_memory, used_numa_memory, labels, state, "
    "cordoned, share_base, heartbeat_at, version, coalesce(conditions, '{}'::jsonb) AS conditions"
)
# `nodes` with what others report about each node (`node_status`, migration 0115): NODE_COLUMNS read FROM this.
NODES_WITH_STATUS = "nodes n LEFT JOIN node_status s USING (name)"
SCHEDULABLE_NODES_SQL = f"""
SELECT {NODE_COLUMNS} FROM {NODES_WITH_STATUS}
 WHERE pod = $1 AND state = 'up' AND NOT cordoned
   AND (heartbeat_at IS NULL OR heartbeat_at > now() - make_interval(secs => $2))
"""
WORKLOAD_COUNTS_SQL = """
SELECT node, count(*) AS n FROM containers
 WHERE pod = $1 AND workload = $2 AND state NOT IN ('removed', 'failed', 'lost')
 GROUP BY node
"""
CHANGE_USAGE_SQL = """
UPDATE nodes SET used_cpu_map = eru_map_add(used_cpu_map, $2::jsonb, $5),
                 used_memory = GREATEST(used_memory + $5 * $3, 0),
                 used_numa_memory = eru_map_add(used_numa_memory, $4::jsonb, $5),
                 version = version + 1
 WHERE name = $1
"""
# FOR NO KEY UPDATE, the lock an UPDATE of non-key columns takes: FOR UPDATE would also conflict with the KEY SHARE
# lock a deploy's container INSERT takes on its node (foreign key), in whatever order the deploy inserts them — the
# container-events deadlock (tests/integration/pipeline/test_lock_order.py).
LOCK_NODES_SQL = "SELECT name FROM nodes WHERE name = ANY($1::text[]) ORDER BY name FOR NO KEY UPDATE"
CHANGE_USAGES_SQL = """
UPDATE nodes AS n SET used_cpu_map = eru_map_add(n.used_cpu_map, u.cpu_map::jsonb, $5),
                      used_memory = GREATEST(n.used_memory + $5 * u.memory, 0),
                      used_numa_memory = eru_map_add(n.used_numa_memory, u.numa_memory::jsonb, $5),
                      version = n.version + 1
  FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) AS u (name, cpu_map, memory, numa_memory)
 WHERE n.name = u.name
"""
INSERT_CONTAINER_SQL = """
INSERT INTO containers (id, deploy_id, node, pod, workload, image, tenant, class, priority, allocation, resources,
                        state, labels, replaces)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb, $11::jsonb, $12, $13::jsonb, $14)
"""
INSERT_DECISION_SQL = "INSERT INTO decisions (id, kind, input, output) VALUES ($1, $2, $3, $4::jsonb)"
# A batch's decisions, deploys, containers and outbox rows in ONE statement (data-modifying CTEs): one round trip
# under the pod's lock instead of four (docs/performance.md "Steady rate": on a busy machine each round trip waits
# for two processes to be scheduled). The foreign keys (containers → deploys, nodes) are checked at the end of the
# statement, when every row is in; the outbox keeps the order of its arrays (its ids are serial: the relay's order)
# and its statement trigger wakes the relays at commit as before. Parameters: decisions $1–$4, deploys $5–$11,
# containers $12–$25, outbox $26–$29, the batch's decision snapshot $30–$31 (docs/replay.md), the outbox rows' hold
# $32 (seconds, NULL: none; docs/store.md "Publishing after the commit"), and what the batch charges each node
# $33–$36 (`usage_columns`): relatively, as CHANGE_USAGES_SQL, after `locked` took the rows in name order as every
# writer of node rows does (docs/store.md "A deploy batch's writes").
INSERT_BATCH_ROWS_SQL = """
WITH decided AS (
INSERT INTO decisions (id, kind, input, output)
SELECT id, kind, input, output::jsonb
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS r (id, kind, input, output)
), snapshotted AS (
INSERT INTO decision_snapshots (id, nodes) SELECT * FROM unnest($30::text[], $31::text[])
), deployed AS (
INSERT INTO deploys (id, request_id, pod, tenant, status, request, result)
SELECT id, request_id, pod, tenant, status, request::jsonb, result::jsonb
  FROM unnest($5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[])
       AS r (id, request_id, pod, tenant, status, request, result)
), placed AS (
INSERT INTO containers (id, deploy_id, node, pod, workload, image, tenant, class, priority, allocation, resources,
                        state, labels, replaces)
SELECT id, deploy_id, node, pod, workload, image, tenant, class, priority, allocation::jsonb, resources::jsonb,
       state, labels::jsonb, replaces
  FROM unnest($12::text[], $13::text[], $14::text[], $15::text[], $16::text[], $17::text[], $18::text[],
              $19::text[], $20::integer[], $21::text[], $22::text[], $23::text[], $24::text[], $25::text[])
       AS r (id, deploy_id, node, pod, workload, image, tenant, class, priority, allocation, resources, state, labels,
             replaces)
), locked AS (
SELECT name FROM nodes WHERE name = ANY($33::text[]) ORDER BY name FOR NO KEY UPDATE
), charged AS (
UPDATE nodes AS n SET used_cpu_map = eru_map_add(n.used_cpu_map, u.cpu_map::jsonb, 1),
                      used_memory = GREATEST(n.used_memory + u.memory, 0),
                      used_numa_memory = eru_map_add(n.used_numa_memory, u.numa_memory::jsonb, 1),
                      version = n.version + 1
  FROM unnest($33::text[], $34::text[], $35::bigint[], $36::text[]) AS u (name, cpu_map, memory, numa_memory)
 WHERE n.name = u.name AND n.name IN (SELECT name FROM locked)
)
INSERT INTO outbox (event_id, subject, headers, body, held_until)
SELECT event_id, subject, headers::jsonb, body, clock_timestamp() + make_interval(secs => $32::float8)
  FROM unnest($26::text[], $27::text[], $28::text[], $29::bytea[])
       WITH ORDINALITY AS queued (event_id, subject, headers, body, position)
 ORDER BY position
ON CONFLICT (event_id) DO NOTHING
"""
DECISION_COLUMNS, DEPLOY_COLUMNS, CONTAINER_COLUMNS, SNAPSHOT_COLUMNS = 4, 7, 14, 2


def columns(rows: Sequence[Sequence[Any]], width: int = 0) -> list[list[Any]]:
    """Rows (tuples in column order) as one list per column: the arguments of the unnest INSERTs above (`width`
    empty lists when there are no rows)."""
    if not rows:
        return [[] for _ in range(width)]
    return [list(column) for column in zip(*rows, strict=True)]


def usage_columns(usages: Mapping[str, Usage]) -> list[list[Any]]:
    """What a batch charges each node as INSERT_BATCH_ROWS_SQL's $33–$36: names, cpu maps and NUMA memory as JSON
    text, memory, in name order."""
    names = sorted(usages)
    return [
        names,
        [json.dumps(dict(usages[name].cpu_map)) for name in names],
        [usages[name].memory for name in names],
        [json.dumps(dict(usages[name].numa_memory)) for name in names],
    ]


def allocation_usage(allocation: Mapping[str, Any]) -> Usage:
    """What a container's allocation (`{"cpu_map", "numa_node", "memory"}`) takes from its node."""
    numa_node = allocation.get("numa_node")
    memory = int(allocation.get("memory") or 0)
    return Usage(
        cpu_map={str(k): int(v) for k, v in (allocation.get("cpu_map") or {}).items()},
        memory=memory,
        numa_memory={str(numa_node): memory} if numa_node is not None else {},
    )


async def change_usage(conn: Connection, node: str, usage: Usage, sign: int) -> None:
    """Add (`sign` 1) or return (`sign` -1) `usage` on `node`, relatively, under the row lock."""
    await conn.execute(
        CHANGE_USAGE_SQL, node, json.dumps(dict(usage.cpu_map)), usage.memory, json.dumps(dict(usage.numa_memory)), sign
    )


async def change_usages(conn: Connection, usages: Mapping[str, Usage], sign: int) -> None:
    """`change_usage` for several nodes in two statements: their rows locked in name order (as every writer locks
    them, so replicas never deadlock), then one relative UPDATE."""
    if not usages:
        return
    if len(usages) == 1:
        [(node, usage)] = usages.items()
        await change_usage(conn, node, usage, sign)
        return
    names = sorted(usages)
    await conn.execute(LOCK_NODES_SQL, names)
    await conn.execute(
        CHANGE_USAGES_SQL,
        names,
        [json.dumps(dict(usages[name].cpu_map)) for name in names],
        [usages[name].memory for name in names],
        [json.dumps(dict(usages[name].numa_memory)) for name in names],
        sign,
    )


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


SHAPES_KEPT = 1024  # capacity texts a node cache keeps parsed (more: it starts again)


def _shape(shapes: dict[Any, Any] | None, kind: str, value: Any, convert: Any) -> dict[str, Any]:
    """A capacity map of a node row (`{core: shares}`, `{core: numa node}`, `{numa node: bytes}`) as a dict."""
    if shapes is None or not isinstance(value, str):
        return {str(k): convert(v) for k, v in _json(value).items()}
    parsed: dict[str, Any] | None = shapes.get((kind, value))
    if parsed is None:
        if len(shapes) >= SHAPES_KEPT:
            shapes.clear()
        parsed = shapes[(kind, value)] = {str(k): convert(v) for k, v in _json(value).items()}
    return parsed


def node_resources(row: Any, shapes: dict[Any, Any] | None = None) -> NodeResources:
    """A node row as the planning core's snapshot.

    Usage on cores (or NUMA nodes) an operator removed with SetNode stays in the record until its containers go,
    but is left out of the snapshot: nothing can be planned there, and the snapshot stays a valid `eru plan` node.
    `shapes` (the node cache's): capacity maps parsed before, by their JSON text — nodes of one shape share one
    read-only mapping, and a node row changed by usage only parses its usage.
    """
    cpu_map = _shape(shapes, "cpu", row["cpu_map"], int)
    numa_memory = _shape(shapes, "numa_memory", row["numa_memory"], int)
    return NodeResources(
        name=row["name"],
        cpu_map=cpu_map,
        memory=int(row["memory"]),
        numa=_shape(shapes, "numa", row["numa"], str),
        numa_memory=numa_memory,
        used_cpu_map={str(k): int(v) for k, v in _json(row["used_cpu_map"]).items() if str(k) in cpu_map},
        used_memory=int(row["used_memory"]),
        used_numa_memory={str(k): int(v) for k, v in _json(row["used_numa_memory"]).items() if str(k) in numa_memory},
    )


async def schedulable_nodes(
    conn: Connection, pod: str, down_after_seconds: float
) -> tuple[list[NodeResources], frozenset[str]]:
    """The pod's schedulable nodes (up, not cordoned, heard from recently), sorted by name, and the names of those
    whose forbid-schedule watermark is active (the eviction service's node condition): no new `batch` there.
    (The allocator reads them through `node_cache.NodeCache`, which parses only the rows that changed.)"""
    rows = await conn.fetch(SCHEDULABLE_NODES_SQL, pod, float(down_after_seconds))
    forbidden = frozenset(row["name"] for row in rows if forbids_batch(_json(row["conditions"])))
    return sorted((node_resources(row) for row in rows), key=lambda node: node.name), forbidden


LEFT_OUT_SQL = "SELECT * FROM eru_nodes_left_out({pod}, {down_after})"
"""The pod's nodes left out and the forbid watermarks' numbers (migration 0190), rows tagged `left_out` /
`watermark`; `{pod}` and `{down_after}` are the statement's parameters."""
LeftOutStates = tuple[dict[str, NodeState], dict[str, tuple[Watermark, ...]]]


def left_out(left_rows: Sequence[Any], watermark_rows: Sequence[Any]) -> LeftOutStates:
    """`eru_nodes_left_out`'s rows as the snapshot's `unschedulable` (node → state) and `watermarks` (node → the
    forbid watermarks its condition reports)."""
    states = {}
    for row in left_rows:
        state = _json(row["j1"]) or {}
        silent = state.get("silent_seconds")
        states[row["name"]] = NodeState(
            bool(state.get("cordoned")), bool(state.get("down")), int(silent) if silent is not None else None
        )
    marks = {row["name"]: condition_marks(_json(row["j1"])) for row in watermark_rows}
    return dict(sorted(states.items())), marks


async def nodes_left_out(conn: Connection, pod: str, down_after_seconds: float) -> LeftOutStates:
    """`left_out` of a read of its own (a snapshot outside a deploy batch's round trip)."""
    rows = await conn.fetch(LEFT_OUT_SQL.format(pod="$1", down_after="$2"), pod, float(down_after_seconds))
    return left_out([r for r in rows if r["part"] == "left_out"], [r for r in rows if r["part"] == "watermark"])


NODE_LABELS_SQL = "SELECT name, labels || operator_labels AS labels FROM nodes WHERE pod = $1 ORDER BY name"
"""Every node of a pod with its effective labels: the agent's overlaid by the operator's (migration 0200)."""


async def node_labels(conn: Connection, pod: str) -> dict[str, dict[str, str]]:
    """Every node of `pod` → its effective labels (what node filters match, docs/placement-modes.md)."""
    return {row["name"]: _json(row["labels"]) or {} for row in await conn.fetch(NODE_LABELS_SQL, pod)}


def forbids_batch(conditions: Any) -> bool:
    """Whether a node's last reported condition forbids placing new batch instances (docs/colocation.md)."""
    if not isinstance(conditions, dict):
        return False
    return bool(conditions.get("forbid_schedule_cpu") or conditions.get("forbid_schedule_memory"))


async def workload_counts(conn: Connection, pod: str, workload: str) -> dict[str, int]:
    """Live instances of `workload` per node of `pod`."""
    rows = await conn.fetch(WORKLOAD_COUNTS_SQL, pod, workload)
    return {row["node"]: int(row["n"]) for row in rows}


def row_dict(row: Any) -> dict[str, Any]:
    """A database row as plain JSON values (jsonb decoded, timestamps as ISO text)."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if hasattr(value, "isoformat"):
            out[key] = value.isoformat()
        elif isinstance(value, str) and key in JSON_COLUMNS:
            out[key] = json.loads(value)
        else:
            out[key] = value
    return out


JSON_COLUMNS = frozenset(
    {
        "cpu_map",
        "numa",
        "numa_memory",
        "used_cpu_map",
        "used_numa_memory",
        "labels",
        "operator_labels",
        "conditions",
        "policy",
        "watermarks",
        "watermark_overrides",
        "allocation",
        "resources",
        "previous_allocation",
        "request",
        "result",
        "input",
        "output",
    }
)
