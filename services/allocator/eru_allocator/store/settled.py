"""Settled requests' rows (docs/store.md "Settled requests"): a dead-lettered deploy request recorded (and forgotten
when an operator redrives it), and an operation's first answer kept so that a resent request gets it back instead of
a second effect. `FIND_SQL` is what `PodSession.find_deploys` reads (eru_allocator.store.postgres).
"""

from __future__ import annotations

import asyncpg

from eru.store.delivery import SettledRequest

# A deploy that ended moves to `deploys_history` (eru.store.retention) and is answered from there exactly as before
# (a refused one with its error) for the retention; past it, the settled row answers until it expires too
# (eru.store.settled_retention: kept while any stream could deliver the request again). One statement: a deploy moving
# meanwhile is seen exactly once. A request id may have several settled rows: the accepted one wins, then the newest.
FIND_SQL = """
SELECT d.id, d.request_id, d.status, d.result, NULL::text AS message_id
  FROM deploys d WHERE d.request_id = ANY($1::text[])
UNION ALL
SELECT h.id, h.request_id, h.status, h.record -> 'result', NULL::text
  FROM deploys_history h WHERE h.request_id = ANY($1::text[])
UNION ALL
(SELECT DISTINCT ON (s.request_id)
        s.deploy_id, s.request_id, 'settled:' || s.outcome, json_build_object('reason', s.reason)::jsonb, s.message_id
   FROM settled_requests s
  WHERE s.request_id = ANY($1::text[]) AND NOT EXISTS (SELECT 1 FROM deploys d WHERE d.request_id = s.request_id)
    AND NOT EXISTS (SELECT 1 FROM deploys_history h WHERE h.request_id = s.request_id)
  ORDER BY s.request_id, s.outcome = 'accepted' DESC, s.settled_at DESC)
"""
# A dead letter replaces the request's earlier dead-letter row, and keeps an accepted row of the same request for
# the dead-letter window too (the letter may be redriven that late; the accepted row must still answer it).
RECORD_DEAD_LETTER_SQL = """
WITH earlier AS (
    DELETE FROM settled_requests WHERE request_id = $1 AND outcome = 'dead_lettered' RETURNING 1
), kept AS (
    UPDATE settled_requests SET expires_at = greatest(expires_at, eru_settle_expiry($1, 'dead_lettered'))
     WHERE request_id = $1 AND outcome = 'accepted' RETURNING 1
)
INSERT INTO settled_requests (request_id, kind, outcome, reason, message_id, expires_at)
SELECT $1, 'deploy', 'dead_lettered', $2, $3, eru_settle_expiry($1, 'dead_lettered')
 WHERE NOT EXISTS (SELECT 1 FROM settled_requests WHERE request_id = $1 AND outcome = 'accepted')
"""
FORGET_DEAD_LETTER_SQL = "DELETE FROM settled_requests WHERE request_id = $1 AND outcome = 'dead_lettered'"
FIND_OPERATION_SQL = """
SELECT reason FROM settled_requests WHERE request_id = $1 AND outcome = 'accepted' ORDER BY settled_at LIMIT 1
"""
RECORD_OPERATION_SQL = """
INSERT INTO settled_requests (request_id, kind, outcome, reason, expires_at)
SELECT $1, $2, 'accepted', $3, eru_settle_expiry($1, 'accepted')
 WHERE NOT EXISTS (SELECT 1 FROM settled_requests WHERE request_id = $1 AND outcome = 'accepted')
"""


async def record_dead_letter(pool: asyncpg.Pool, request_key: str, reason: str, message_id: str) -> None:
    """Settle `request_key` as dead-lettered by message `message_id` (unless it was accepted: that row wins)."""
    await pool.execute(RECORD_DEAD_LETTER_SQL, request_key, reason, message_id)


async def forget_dead_letter(pool: asyncpg.Pool, request_key: str) -> None:
    """Drop `request_key`'s dead-letter row: a redriven request may deploy now, unless it already did."""
    await pool.execute(FORGET_DEAD_LETTER_SQL, request_key)


async def operation_answer(pool: asyncpg.Pool, key: str) -> str | None:
    """The first answer (JSON text) an operation settled under `key` gave, None when it never ran."""
    found = await pool.fetchval(FIND_OPERATION_SQL, key)
    return None if found is None else str(found)


async def record_operation(pool: asyncpg.Pool, key: str, operation: str, answer: str) -> None:
    """Keep `answer` (JSON text) as the answer of `operation` settled under `key` (the first one recorded wins)."""
    await pool.execute(RECORD_OPERATION_SQL, key, operation, answer)


SETTLED_SQL = """
SELECT request_id, kind, outcome, reason, message_id FROM settled_requests
 WHERE request_id = $1
 ORDER BY outcome = 'accepted' DESC, settled_at DESC
 LIMIT 1
"""


async def settled_request(pool: asyncpg.Pool, key: str) -> SettledRequest | None:
    """What `key` was settled as (the accepted row first, then the newest), None when never settled."""
    row = await pool.fetchrow(SETTLED_SQL, key)
    if row is None:
        return None
    return SettledRequest(row["request_id"], row["kind"], row["outcome"], row["reason"], row["message_id"])
