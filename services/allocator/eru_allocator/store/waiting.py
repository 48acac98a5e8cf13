"""Admission waits' rows (docs/fairness-and-scoring.md "Waiting for admission"): a submitted wait notifies this
channel at commit, and the admission pass listens on it (`eru_allocator.admission.waiting`)."""

from __future__ import annotations

from typing import Any

import asyncpg

from eru.store.transaction import Connection

CHANNEL = "eru_admission"
"""The `NOTIFY` channel of new admission waits (the payload names the pod)."""

NOTIFY_SQL = "SELECT pg_notify($1, $2)"


async def wake_admission(conn: Connection, pod: str) -> None:
    """Wake the admission passes for `pod` when the caller's transaction commits (its reservations or waits
    changed)."""
    await conn.execute(NOTIFY_SQL, CHANNEL, pod)


WAITS_SQL = """
SELECT deploy_id, request_key, tenant, arrival, request, envelope, reason, deadline <= now() AS expired
  FROM deploy_waits WHERE pod = $1 ORDER BY arrival FOR UPDATE
"""
FAIL_DEPLOY_SQL = (
    "UPDATE deploys SET status = 'failed', result = COALESCE(result, '{}'::jsonb) || $2::jsonb WHERE id = $1"
)
ADMIT_DEPLOY_SQL = "UPDATE deploys SET status = $2, result = $3::jsonb WHERE id = $1"
DROP_WAIT_SQL = "DELETE FROM deploy_waits WHERE deploy_id = $1"
REASON_SQL = "UPDATE deploy_waits SET reason = $2::jsonb WHERE deploy_id = $1"
WAITING_PODS_SQL = "SELECT DISTINCT pod FROM deploy_waits ORDER BY pod"
NEXT_DEADLINE_SQL = "SELECT extract(epoch FROM min(deadline) - now()) FROM deploy_waits"


async def pod_waits(conn: Connection, pod: str) -> list[Any]:
    """The pod's waits in arrival order, locked, each with `expired` (its deadline passed)."""
    return list(await conn.fetch(WAITS_SQL, pod))


async def fail_wait(conn: Connection, deploy_id: str, result: str) -> None:
    """The waiting deploy fails with `result` (JSON text merged into its result) and leaves the queue."""
    await conn.execute(FAIL_DEPLOY_SQL, deploy_id, result)
    await conn.execute(DROP_WAIT_SQL, deploy_id)


async def admit_wait(conn: Connection, deploy_id: str, status: str, result: str) -> None:
    """The waiting deploy was placed: its row takes the placement's `status` and `result` (JSON text) and it leaves
    the queue."""
    await conn.execute(ADMIT_DEPLOY_SQL, deploy_id, status, result)
    await conn.execute(DROP_WAIT_SQL, deploy_id)


async def set_wait_reason(conn: Connection, deploy_id: str, reason: str) -> None:
    """Why the deploy still waits (JSON text: code, message, details)."""
    await conn.execute(REASON_SQL, deploy_id, reason)


async def waiting_pods(pool: asyncpg.Pool) -> list[str]:
    """The pods with waiting requests, in name order."""
    return [row["pod"] for row in await pool.fetch(WAITING_PODS_SQL)]


async def next_deadline(pool: asyncpg.Pool) -> float | None:
    """Seconds until the earliest wait's deadline (negative when past), None when nothing waits."""
    left = await pool.fetchval(NEXT_DEADLINE_SQL)
    return None if left is None else float(left)
