"""Container events' rows (docs/store.md "Container events in two statements", migration 0135): one round trip opens
a batch (inbox marks, the locks in a fixed order, the rows the state machine reads and the members of the deploys
still planned), one statement writes what the batch changed, and the containers no node agent answered for in time
are read for `containers.events.fail_overdue` (docs/allocator.md "The store seam").
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import asyncpg

from eru.store.container_events import (
    EventMember,
    EventRow,
    FinishedDeploy,
    OpenedEventBatch,
    OverdueContainer,
)
from eru.store.protocol import OutboxMessage
from eru.store.transaction import Connection
from eru_allocator.store.outbox import queue_columns

# One round trip opens the batch: inbox marks, then the locks in the fixed order, then the members of the deploys
# still planned (migration 0135, docs/store.md "Container events in two statements").
OPEN_SQL = "SELECT * FROM eru_open_event_batch($1, $2::text[], $3::text[], $4::text[])"
# One statement writes what the batch changed: the rows (state only, or reshaped), the finished deploys, the outbox
# (held for `publisher` when there is one: $18 seconds; it returns the event ids it inserted, a repeat's are not).
# Every row it updates is locked already by OPEN_SQL; the two container updates touch disjoint rows.
WRITE_SQL = """
WITH moved AS (
    UPDATE containers AS c SET state = u.state, reason = u.reason
      FROM unnest($1::text[], $2::text[], $3::text[]) AS u (id, state, reason)
     WHERE c.id = u.id
    RETURNING c.id
), reshaped AS (
    UPDATE containers AS c
       SET state = u.state, reason = u.reason, allocation = u.allocation::jsonb,
           previous_allocation = u.previous_allocation::jsonb, resources = u.resources::jsonb, replaces = u.replaces
      FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[])
           AS u (id, state, reason, allocation, previous_allocation, resources, replaces)
     WHERE c.id = u.id
    RETURNING c.id
), finished AS (
    UPDATE deploys AS d SET status = f.status, result = COALESCE(d.result, '{}'::jsonb) || f.summary::jsonb
      FROM unnest($11::text[], $12::text[], $13::text[]) AS f (id, status, summary)
     WHERE d.id = f.id
    RETURNING d.id
), queued AS (
    INSERT INTO outbox (event_id, subject, headers, body, held_until)
    SELECT event_id, subject, headers::jsonb, body, clock_timestamp() + make_interval(secs => $18::float8)
      FROM unnest($14::text[], $15::text[], $16::text[], $17::bytea[])
           WITH ORDINALITY AS q (event_id, subject, headers, body, position)
     ORDER BY position
    ON CONFLICT (event_id) DO NOTHING
    RETURNING event_id
)
SELECT (SELECT count(*) FROM moved) + (SELECT count(*) FROM reshaped) AS changed,
       (SELECT count(*) FROM finished) AS finished,
       ARRAY(SELECT event_id FROM queued) AS queued
"""
PENDING_SQL = """
SELECT id, node, deploy_id FROM containers
 WHERE state IN ('planned', 'creating') AND replaces IS NULL
   AND updated_at < now() - make_interval(secs => $1)
 ORDER BY id LIMIT 1000
"""


async def open_event_batch(
    conn: Connection, inbox: str, messages: Sequence[str], containers: Sequence[tuple[str, str]]
) -> OpenedEventBatch:
    """Mark `messages` in `inbox`, lock what `containers` (container id, message id) touch, read it."""
    rows = await conn.fetch(OPEN_SQL, inbox, list(messages), [c for c, _ in containers], [m for _, m in containers])
    opened = OpenedEventBatch()
    for row in rows:
        part = row["part"]
        if part == "fresh":
            opened.fresh.add(row["id"])
        elif part == "deploy":
            opened.deploy_states[row["id"]] = row["state"]
            opened.placements[row["id"]] = _loads(row["allocation"])
        elif part == "row":
            opened.rows[row["id"]] = EventRow(
                row["id"],
                row["deploy_id"],
                row["node"],
                row["state"],
                row["reason"],
                _text(row["allocation"]) or "null",
                _text(row["previous_allocation"]),
                _text(row["resources"]) or "null",
                row["replaces"],
                row["tenant"],
            )
        elif part == "member":
            opened.members.append(EventMember(row["id"], row["deploy_id"], row["state"], row["reason"]))
    return opened


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value)


async def write_event_batch(
    conn: Connection,
    moved: Sequence[EventRow],
    reshaped: Sequence[EventRow],
    finished: Sequence[FinishedDeploy],
    messages: Sequence[OutboxMessage],
    hold: float | None,
) -> set[str]:
    """Write a batch's changes in one statement: container rows whose state moved (`moved`) or that were reshaped
    (`reshaped`: allocation, resources, replaces too), the finished deploys, the outbox rows (held `hold` seconds for
    the committing process, else the relays'); returns the event ids of the outbox rows it inserted."""
    if not (moved or reshaped or finished or messages):
        return set()
    written = await conn.fetchrow(
        WRITE_SQL,
        [r.id for r in moved],
        [r.state for r in moved],
        [r.reason for r in moved],
        [r.id for r in reshaped],
        [r.state for r in reshaped],
        [r.reason for r in reshaped],
        [r.allocation for r in reshaped],
        [r.previous_allocation for r in reshaped],
        [r.resources for r in reshaped],
        [r.replaces for r in reshaped],
        [deploy.id for deploy in finished],
        [deploy.status for deploy in finished],
        [deploy.summary for deploy in finished],
        *queue_columns(messages),
        hold,
    )
    return set(written["queued"]) if written is not None else set()


async def overdue(pool: asyncpg.Pool, timeout_seconds: float) -> list[OverdueContainer]:
    """Up to 1,000 containers planned or creating (not pending replacements) unchanged for `timeout_seconds`, by id."""
    rows = await pool.fetch(PENDING_SQL, float(timeout_seconds))
    return [OverdueContainer(row["id"], row["node"], row["deploy_id"]) for row in rows]
