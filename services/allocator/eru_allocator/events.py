"""Node agents' container events → container states, returned resources, and each deploy's terminal event.

One transaction per event: the inbox mark (a repeat is skipped), the deploy row lock (events of one deploy are
applied one at a time, so exactly one of them sees the last pending container and emits the terminal event), the
container row lock, the state change, the relative usage change, and the outgoing events.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import structlog

from eru.bus import Envelope, new_envelope
from eru.bus.subjects import deploy_event
from eru.domain import ContainerEvent, DeployEvent
from eru.store import seen_before, transaction
from eru.store.transaction import Connection
from eru_allocator import records
from eru_allocator.lifecycle import deploy_outcome, holds_resources, transition
from eru_allocator.outbox import queue

log = structlog.get_logger()

INBOX = "allocator-container-events"
CONTAINER_SQL = """
SELECT id, deploy_id, node, state, allocation, previous_allocation, replaces FROM containers WHERE id = $1 FOR UPDATE
"""
PENDING_REPLACEMENT_SQL = """
SELECT id, replaces FROM containers WHERE replaces = $1 AND state IN ('planned', 'creating') FOR UPDATE
"""
DEPLOY_CONTAINERS_SQL = "SELECT id, state, reason FROM containers WHERE deploy_id = $1 AND replaces IS NULL"


@dataclass(frozen=True)
class EventContext:
    """What the event handler needs from the running service."""

    pool: Any
    source: str


async def apply_event(ctx: EventContext, event: ContainerEvent, envelope: Envelope) -> None:
    """Apply one container event exactly once (repeats and stale events change nothing)."""
    async with transaction(ctx.pool) as conn:
        if await seen_before(conn, INBOX, envelope.id):
            return
        deploy_id = await conn.fetchval("SELECT deploy_id FROM containers WHERE id = $1", event.container_id)
        status = None
        if deploy_id is not None:
            status = await conn.fetchval("SELECT status FROM deploys WHERE id = $1 FOR UPDATE", deploy_id)
        row = await conn.fetchrow(CONTAINER_SQL, event.container_id)
        if row is None:
            log.info("container.event.unknown", container_id=event.container_id, node=event.node, kind=event.kind)
            return
        if row["replaces"] is not None:
            # a replacement waits for the decisive event: replaced (success) or failed/removed (rolled back)
            if event.kind == "replaced":
                await _replaced(conn, row)
            elif event.kind in ("failed", "removed"):
                await _replacement_failed(conn, row, event)
        else:
            successor = await conn.fetchrow(PENDING_REPLACEMENT_SQL, row["id"])
            if successor is not None and event.kind in ("replaced", "removed"):
                await _replaced(conn, successor)
            elif event.kind != "replaced":
                await _transition(conn, row, event)
        if deploy_id is not None and status == "planned":
            await _maybe_finish(ctx, conn, deploy_id, envelope)


async def _transition(conn: Connection, row: Any, event: ContainerEvent) -> None:
    change = transition(row["state"], event.kind, updating=row["previous_allocation"] is not None)
    if change is None:
        return
    allocation = _loads(row["allocation"])
    previous = _loads(row["previous_allocation"])
    pending_replacement = row["replaces"] is not None and row["state"] in ("planned", "creating")
    if change.releases and holds_resources(row["state"], pending_replacement):
        await records.change_usage(conn, row["node"], records.allocation_usage(allocation), -1)
    if change.restore_previous and previous is not None:
        # the node agent refused the update: the old allocation (and requirement) stay, so does the old charge
        resources = previous.pop("resources", None)
        await records.change_usage(conn, row["node"], records.allocation_usage(allocation), -1)
        await records.change_usage(conn, row["node"], records.allocation_usage(previous), 1)
        await conn.execute(
            "UPDATE containers SET state = $2, reason = $3, allocation = $4::jsonb, previous_allocation = NULL, "
            "resources = COALESCE($5::jsonb, resources) WHERE id = $1",
            row["id"],
            change.state,
            event.reason or "update failed",
            json.dumps(previous),
            json.dumps(resources) if resources is not None else None,
        )
        return
    clear = change.clear_previous or change.releases
    await conn.execute(
        "UPDATE containers SET state = $2, reason = COALESCE(NULLIF($3, ''), reason), "
        "previous_allocation = CASE WHEN $4 THEN NULL ELSE previous_allocation END WHERE id = $1",
        row["id"],
        change.state,
        event.reason,
        clear,
    )


async def _replaced(conn: Connection, replacement: Any) -> None:
    """The replace succeeded: the new container runs with the old one's allocation (no charge moves), the old one is
    gone."""
    old = replacement["replaces"]
    await conn.execute(
        "UPDATE containers SET state = 'running', replaces = NULL, reason = 'replaces ' || $2 WHERE id = $1",
        replacement["id"],
        old,
    )
    await conn.execute(
        "UPDATE containers SET state = 'removed', reason = 'replaced by ' || $2 WHERE id = $1 "
        "AND state NOT IN ('removed', 'failed')",
        old,
        replacement["id"],
    )


async def _replacement_failed(conn: Connection, row: Any, event: ContainerEvent) -> None:
    """The replacement did not become healthy: it is gone, the old one runs on (it never lost its allocation)."""
    if event.kind not in ("failed", "removed"):
        return
    await conn.execute(
        "UPDATE containers SET state = 'failed', reason = $2 WHERE id = $1", row["id"], event.reason or event.kind
    )
    await conn.execute(
        "UPDATE containers SET state = 'running' WHERE id = $1 AND state IN ('paused', 'updating')", row["replaces"]
    )


async def _maybe_finish(ctx: EventContext, conn: Connection, deploy_id: str, cause: Envelope) -> None:
    rows = await conn.fetch(DEPLOY_CONTAINERS_SQL, deploy_id)
    outcome = deploy_outcome([(r["id"], r["state"], r["reason"]) for r in rows])
    if outcome is None:
        return
    result_sql = "UPDATE deploys SET status = $2, result = COALESCE(result, '{}'::jsonb) || $3::jsonb WHERE id = $1"
    summary = {"started": outcome.started, "failed": outcome.failed}
    await conn.execute(result_sql, deploy_id, outcome.kind, json.dumps(summary))
    event = DeployEvent(deploy_id=deploy_id, kind=outcome.kind, started=outcome.started, failed=outcome.failed)
    envelope = new_envelope(f"eru.deploy.{outcome.kind}", ctx.source, correlation_id=deploy_id, causation=cause)
    await queue(conn, deploy_event(deploy_id, outcome.kind), event, envelope)
    log.info(
        "deploy.finished",
        deploy_id=deploy_id,
        outcome=outcome.kind,
        started=len(outcome.started),
        failed=len(outcome.failed),
    )


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value
