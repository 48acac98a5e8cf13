"""Admission waits' rows (docs/fairness-and-scoring.md "Waiting for admission"): a submitted wait notifies this
channel at commit, and the admission pass listens on it (`eru_allocator.admission.waiting`)."""

from __future__ import annotations

from eru.store.transaction import Connection

CHANNEL = "eru_admission"
"""The `NOTIFY` channel of new admission waits (the payload names the pod)."""

NOTIFY_SQL = "SELECT pg_notify($1, $2)"


async def wake_admission(conn: Connection, pod: str) -> None:
    """Wake the admission passes for `pod` when the caller's transaction commits (its reservations or waits
    changed)."""
    await conn.execute(NOTIFY_SQL, CHANNEL, pod)
