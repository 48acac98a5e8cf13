"""`submit_plan` in PostgreSQL (docs/store.md "A deploy batch's writes", docs/pipeline.md "The deploy loop"): the
batch's rows written by ONE statement that first locks the nodes the plan touches, in name order, and re-checks each
against its newest row (still the pod's, up, not cordoned, the plan's charge within what is free: `eru.store.plans
.recheck` is the same rule in Python). When a node fails, the statement writes nothing and returns the rejected nodes
with their reasons; the caller drops the parts that touch them and submits the rest the same way.

The statement is `sql.INSERT_BATCH_ROWS_SQL` with every write gated on `go` (no touched node rejected) and the
rejected nodes as its result: the fast path costs no round trip more than before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import asyncpg

from eru.store.plans import Plan, total_usage
from eru.store.protocol import Conflict, PodWrites
from eru.store.transaction import Connection
from eru_allocator.store import sql
from eru_allocator.store.outbox import queue_columns

# $1–$36 as sql.INSERT_BATCH_ROWS_SQL; $37 the pod. A node missing, moved to another pod, down or cordoned, or whose
# cores, memory or NUMA memory would be charged beyond its capacity is rejected (`rejected`), and then no CTE writes.
SUBMIT_PLAN_SQL = """
WITH checked AS (
SELECT n.name,
       CASE WHEN n.pod <> $37 THEN 'gone'
            WHEN n.state <> 'up' THEN 'down'
            WHEN n.cordoned THEN 'cordoned'
            WHEN n.used_memory + u.memory > n.memory THEN 'memory'
            WHEN EXISTS (SELECT 1 FROM jsonb_each_text(u.cpu_map::jsonb) AS c (core, pieces)
                          WHERE c.pieces::numeric > 0
                            AND COALESCE((n.used_cpu_map ->> c.core)::numeric, 0) + c.pieces::numeric
                                > COALESCE((n.cpu_map ->> c.core)::numeric, 0)) THEN 'cpu'
            WHEN EXISTS (SELECT 1 FROM jsonb_each_text(u.numa_memory::jsonb) AS m (id, amount)
                          WHERE m.amount::numeric > 0 AND n.numa_memory ? m.id
                            AND COALESCE((n.used_numa_memory ->> m.id)::numeric, 0) + m.amount::numeric
                                > (n.numa_memory ->> m.id)::numeric) THEN 'numa_memory'
       END AS reason
  FROM nodes AS n
  JOIN unnest($33::text[], $34::text[], $35::bigint[], $36::text[]) AS u (name, cpu_map, memory, numa_memory)
    ON n.name = u.name
 ORDER BY n.name
   FOR NO KEY UPDATE OF n
), rejected AS (
SELECT t.name, COALESCE(c.reason, 'gone') AS reason
  FROM unnest($33::text[]) AS t (name) LEFT JOIN checked AS c ON c.name = t.name
 WHERE c.name IS NULL OR c.reason IS NOT NULL
), go AS (
SELECT NOT EXISTS (SELECT 1 FROM rejected) AS ok
), decided AS (
INSERT INTO decisions (id, kind, input, output)
SELECT id, kind, input, output::jsonb
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS r (id, kind, input, output)
 WHERE (SELECT ok FROM go)
), snapshotted AS (
INSERT INTO decision_snapshots (id, nodes)
SELECT * FROM unnest($30::text[], $31::text[]) WHERE (SELECT ok FROM go)
), deployed AS (
INSERT INTO deploys (id, request_id, pod, tenant, status, request, result)
SELECT id, request_id, pod, tenant, status, request::jsonb, result::jsonb
  FROM unnest($5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[])
       AS r (id, request_id, pod, tenant, status, request, result)
 WHERE (SELECT ok FROM go)
), placed AS (
INSERT INTO containers (id, deploy_id, node, pod, workload, image, tenant, class, priority, allocation, resources,
                        state, labels, replaces)
SELECT id, deploy_id, node, pod, workload, image, tenant, class, priority, allocation::jsonb, resources::jsonb,
       state, labels::jsonb, replaces
  FROM unnest($12::text[], $13::text[], $14::text[], $15::text[], $16::text[], $17::text[], $18::text[],
              $19::text[], $20::integer[], $21::text[], $22::text[], $23::text[], $24::text[], $25::text[])
       AS r (id, deploy_id, node, pod, workload, image, tenant, class, priority, allocation, resources, state, labels,
             replaces)
 WHERE (SELECT ok FROM go)
), charged AS (
UPDATE nodes AS n SET used_cpu_map = eru_map_add(n.used_cpu_map, u.cpu_map::jsonb, 1),
                      used_memory = GREATEST(n.used_memory + u.memory, 0),
                      used_numa_memory = eru_map_add(n.used_numa_memory, u.numa_memory::jsonb, 1),
                      version = n.version + 1
  FROM unnest($33::text[], $34::text[], $35::bigint[], $36::text[]) AS u (name, cpu_map, memory, numa_memory)
 WHERE n.name = u.name AND n.name IN (SELECT name FROM checked) AND (SELECT ok FROM go)
), queued AS (
INSERT INTO outbox (event_id, subject, headers, body, held_until)
SELECT event_id, subject, headers::jsonb, body, clock_timestamp() + make_interval(secs => $32::float8)
  FROM unnest($26::text[], $27::text[], $28::text[], $29::bytea[])
       WITH ORDINALITY AS queued (event_id, subject, headers, body, position)
 WHERE (SELECT ok FROM go)
 ORDER BY position
ON CONFLICT (event_id) DO NOTHING
)
SELECT name, reason FROM rejected ORDER BY name
"""


async def write_checked(conn: Connection, pod: str, writes: PodWrites) -> dict[str, str]:
    """Write `writes` unless a node they charge fails its re-check; the rejected nodes (name → reason), none when
    written. `Conflict` when a request key was committed meanwhile."""
    totals = {name: total_usage(usages) for name, usages in writes.usage.items()}
    try:
        rows = await conn.fetch(
            SUBMIT_PLAN_SQL,
            *sql.columns(writes.decisions, sql.DECISION_COLUMNS),
            *sql.columns(writes.deploys, sql.DEPLOY_COLUMNS),
            *sql.columns(writes.containers, sql.CONTAINER_COLUMNS),
            *queue_columns(writes.messages),
            *sql.columns(writes.decision_snapshots, sql.SNAPSHOT_COLUMNS),
            writes.hold_seconds,
            *sql.usage_columns(totals),
            pod,
        )
    except asyncpg.UniqueViolationError as error:
        if error.table_name == "containers":  # not a request key: as before, not a conflict to retry
            raise
        raise Conflict("a request id of this batch was committed concurrently") from None
    return {row["name"]: row["reason"] for row in rows}


async def submit_checked(
    conn: Connection, plan: Plan, after: Callable[[PodWrites], Awaitable[None]]
) -> tuple[tuple[int, ...], dict[str, str], PodWrites | None]:
    """Submit `plan`'s parts, dropping those that touch a rejected node until what is left is written (or nothing
    is left): the parts committed, every node rejected and the rows written. `after(writes)` runs once the rows are
    in (the waits)."""
    kept = list(range(len(plan.parts)))
    writes = plan.writes
    rejected: dict[str, str] = {}
    while True:
        found = await write_checked(conn, plan.pod, writes)
        if not found:
            await after(writes)
            return tuple(kept), rejected, writes
        rejected.update(found)
        kept = plan.kept_without(rejected)
        if not kept:
            return (), rejected, None
        writes = plan.writes_for(kept)


__all__ = ["SUBMIT_PLAN_SQL", "submit_checked", "write_checked"]
