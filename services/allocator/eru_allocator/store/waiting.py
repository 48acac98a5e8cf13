"""Admission waits' rows (docs/fairness-and-scoring.md "Waiting for admission"): a submitted wait notifies this
channel at commit, and the admission pass listens on it (`eru_allocator.admission.waiting`). The waits capability
(`eru.store.waits`) on PostgreSQL: `PgWaitSession`, a pod session's part (mixed into `PgPodSession`), and
`PgAdmissionQueue`, the admission loop's (beside `PgStore`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import asyncpg

from eru.fairness import Tenant
from eru.store.transaction import Connection
from eru.store.waits import AdmissionQueue, PendingWait, WaitSession
from eru_allocator.store.accounting import json_text, load_tenants

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


async def pod_waits(conn: Connection, pod: str) -> list[PendingWait]:
    """The pod's waits in arrival order, locked, each with `expired` (its deadline passed)."""
    return [
        PendingWait(
            row["deploy_id"],
            row["request_key"],
            row["tenant"],
            int(row["arrival"]),
            json_text(row["request"]),
            json_text(row["envelope"]),
            json_text(row["reason"]),
            bool(row["expired"]),
        )
        for row in await conn.fetch(WAITS_SQL, pod)
    ]


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


class PgWaitSession:
    """`WaitSession` inside a pod session: its connection `conn` (in the session's transaction) and `pod`, the pod's
    lock taken by `_lock` before the first statement."""

    conn: Connection
    pod: str

    async def _lock(self) -> None:
        raise NotImplementedError  # PgPodSession's

    async def pod_waits(self) -> list[PendingWait]:
        """The pod's waits in arrival order, locked (`FOR UPDATE`) until the transaction ends."""
        await self._lock()
        return await pod_waits(self.conn, self.pod)

    async def fail_wait(self, deploy_id: str, result: str) -> None:
        """The waiting deploy fails with `result` merged into its result and leaves the queue."""
        await self._lock()
        await fail_wait(self.conn, deploy_id, result)

    async def admit_wait(self, deploy_id: str, status: str, result: str) -> None:
        """The waiting deploy takes the placement's `status` and `result` and leaves the queue."""
        await self._lock()
        await admit_wait(self.conn, deploy_id, status, result)

    async def set_wait_reason(self, deploy_id: str, reason: str) -> None:
        """Why the deploy still waits."""
        await self._lock()
        await set_wait_reason(self.conn, deploy_id, reason)

    async def tenants(self) -> dict[str, Tenant]:
        """Every tenant and group by name (read in the session's transaction)."""
        await self._lock()
        return await load_tenants(self.conn)


class PgAdmissionQueue:
    """`AdmissionQueue` over `pool`: the reads between passes, and `LISTEN eru_admission` on a connection of the pool
    held for a `listen_admission` block."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def waiting_pods(self) -> list[str]:
        """The pods with waiting requests, in name order."""
        return await waiting_pods(self.pool)

    async def next_deadline(self) -> float | None:
        """Seconds until the earliest wait's deadline (negative when past), None when nothing waits."""
        return await next_deadline(self.pool)

    @asynccontextmanager
    async def listen_admission(self, wake: Callable[[str], None]) -> AsyncIterator[None]:
        """`wake(pod)` for each `NOTIFY eru_admission` (the payload names the pod) while the block runs."""

        def on_notify(_conn: object, _pid: int, _channel: str, payload: object) -> None:
            wake(str(payload))

        listener = await self.pool.acquire()
        try:
            await listener.add_listener(CHANNEL, on_notify)
            try:
                yield
            finally:
                with contextlib.suppress(Exception):  # a connection lost meanwhile: the pool replaces it
                    await listener.remove_listener(CHANNEL, on_notify)
        finally:
            await self.pool.release(listener)


def _conforms(session: PgWaitSession, queue: PgAdmissionQueue) -> tuple[WaitSession, AdmissionQueue]:
    """Where mypy checks that the mixins are a `WaitSession` and an `AdmissionQueue`."""
    return session, queue
