"""Read-only views for operators (`eru.allocator.query`): the newest deploys with their progress, and one recorded
decision with its whole input (what the web console and `eru replay` without a database connection read)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from eru.errors import InvalidInput, NotFound
from eru.store.decisions import full_input
from eru.store.retention import expired_at
from eru.store.transaction import Connection
from eru_allocator import records

DEPLOYS_SQL = """
SELECT d.id, d.request_id, d.pod, d.tenant, d.status, d.created_at, d.updated_at,
       d.result->>'decision_id' AS decision_id, d.request->'workload'->>'name' AS workload,
       d.request->'workload'->>'image' AS image, d.request->'workload'->>'priority_class' AS class,
       COALESCE((d.request->>'count')::int, 0) AS count, d.result->'error'->>'message' AS error,
       COALESCE(c.states, '{}'::jsonb) AS states
  FROM deploys d
  LEFT JOIN LATERAL (
       SELECT jsonb_object_agg(s.state, s.n) AS states
         FROM (SELECT state, count(*) AS n FROM containers WHERE deploy_id = d.id GROUP BY state) s
  ) c ON true
 WHERE ($1::text IS NULL OR d.pod = $1)
   AND ($3::timestamptz IS NULL OR (d.created_at, d.id) < ($3, $4))
   AND ($5::text IS NULL OR split_part(d.tenant, '/', 1) = $5)
 ORDER BY d.created_at DESC, d.id DESC
 LIMIT $2
"""


async def deploy_rows(
    conn: Connection,
    pod: str | None,
    limit: int,
    *,
    before: tuple[datetime, str] | None = None,
    tenant: str | None = None,
) -> list[dict[str, Any]]:
    """The newest `limit` deploys (of `pod`, or all; of `tenant` and its groups, or every tenant's) older than
    `before` (creation time, id: a page's cursor), newest first: status, workload, count, the decision id and the
    deploy's containers counted by state (`states`: {"running": 3, "creating": 1})."""
    rows = await conn.fetch(DEPLOYS_SQL, pod, limit, *(before or (None, None)), tenant)
    result = []
    for row in rows:
        item = records.row_dict(row)
        states = item.get("states")
        item["states"] = json.loads(states) if isinstance(states, str) else (states or {})
        result.append(item)
    return result


async def decision_row(conn: Connection, decision_id: str | None) -> dict[str, Any]:
    """One recorded decision: `{"id", "kind", "input", "output", "created_at"}`; `InvalidInput` naming
    `decision_id` when it is missing or unknown."""
    if not decision_id:
        raise InvalidInput("decision_id", "needed to show a decision")
    row = await conn.fetchrow("SELECT id, kind, input, output, created_at FROM decisions WHERE id = $1", decision_id)
    if row is None:
        gone = await expired_at(conn, "decisions", decision_id)
        if gone is not None:  # retention dropped it (docs/operations.md "Retention")
            raise NotFound("decision_id", f"decision {decision_id!r} expired at {gone[0].isoformat()} (retention)")
        raise NotFound("decision_id", f"unknown decision {decision_id!r}")
    found = records.row_dict(row)
    if isinstance(found.get("input"), Mapping):  # a compact record: its batch's snapshot put back (docs/replay.md)
        found["input"] = await full_input(conn, found["input"])
    return found
