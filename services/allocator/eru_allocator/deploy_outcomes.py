"""A deploy's end (docs/pipeline.md, step 6): once none of its containers is pending, its terminal event
(`completed`, `partial` with the failures, or `failed`) and its status; before that, `progress` events with what
reported in each batch. The deploy rows are locked by the caller, so exactly one transaction sees a deploy's last
pending container.
"""

from __future__ import annotations

import json
from typing import Any

import structlog

from eru.activity import ACTIVITY
from eru.bus import Envelope, new_envelope
from eru.bus.subjects import deploy_event
from eru.domain import DeployEvent
from eru.store.protocol import OutboxMessage
from eru.store.transaction import Connection
from eru_allocator.lifecycle import Outcome, deploy_outcome
from eru_allocator.outbox import queue_many

log = structlog.get_logger()

FINISH_DEPLOYS_SQL = """
UPDATE deploys AS d SET status = f.status, result = COALESCE(d.result, '{}'::jsonb) || f.summary::jsonb
  FROM unnest($1::text[], $2::text[], $3::text[]) AS f (id, status, summary)
 WHERE d.id = f.id
RETURNING d.id, d.result
"""
# Deploys that still wait for a container: only the others need their members read (a terminal event is due).
STILL_PENDING_SQL = """
SELECT coalesce(array_agg(DISTINCT deploy_id), '{}') FROM containers
 WHERE deploy_id = ANY($1::text[]) AND replaces IS NULL AND state IN ('planned', 'creating')
"""
DEPLOY_CONTAINERS_SQL = """
SELECT deploy_id, id, state, reason FROM containers WHERE deploy_id = ANY($1::text[]) AND replaces IS NULL
"""


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


async def finish_deploys(
    source: str,
    conn: Connection,
    deploy_ids: list[str],
    causes: dict[str, Envelope],
    progress: dict[str, tuple[list[str], dict[str, str]]],
) -> None:
    """Terminal events for the deploys whose containers have all reported; `progress` events (what reported in this
    batch, incrementally) for the others, so a client following `eru.deploy.<id>.*` sees containers come up."""
    if not deploy_ids:
        return
    pending = set(await conn.fetchval(STILL_PENDING_SQL, deploy_ids))
    members: dict[str, list[tuple[str, str, str | None]]] = {deploy_id: [] for deploy_id in pending}
    finished = [deploy_id for deploy_id in deploy_ids if deploy_id not in pending]
    if finished:
        for row in await conn.fetch(DEPLOY_CONTAINERS_SQL, finished):
            members.setdefault(row["deploy_id"], []).append((row["id"], row["state"], row["reason"]))
    done: dict[str, Outcome] = {}
    for deploy_id, states in members.items():
        outcome = None if deploy_id in pending else deploy_outcome(states)
        if outcome is not None:
            done[deploy_id] = outcome
    results: dict[str, Any] = {}
    if done:
        order = sorted(done)
        summaries = [json.dumps({"started": done[d].started, "failed": done[d].failed}) for d in order]
        finished_rows = await conn.fetch(FINISH_DEPLOYS_SQL, order, [done[d].kind for d in order], summaries)
        results = {row["id"]: row["result"] for row in finished_rows}
    messages: list[OutboxMessage] = []
    for deploy_id in sorted(members):
        outcome = done.get(deploy_id)
        if outcome is None:
            if deploy_id in progress:
                started, failed = progress[deploy_id]
                update = DeployEvent(deploy_id=deploy_id, kind="progress", started=sorted(started), failed=failed)
                envelope = new_envelope(
                    "eru.deploy.progress", source, correlation_id=deploy_id, causation=causes.get(deploy_id)
                )
                messages.append(OutboxMessage(deploy_event(deploy_id, "progress"), update, envelope))
            continue
        placements = (_loads(results.get(deploy_id)) or {}).get("placements", {})
        event = DeployEvent(
            deploy_id=deploy_id,
            kind=outcome.kind,
            placements=placements,
            started=outcome.started,
            failed=outcome.failed,
        )
        envelope = new_envelope(
            f"eru.deploy.{outcome.kind}", source, correlation_id=deploy_id, causation=causes.get(deploy_id)
        )
        messages.append(OutboxMessage(deploy_event(deploy_id, outcome.kind), event, envelope))
        ACTIVITY.count(f"deploy.{outcome.kind}")
        log.debug(
            "deploy.finished",
            deploy_id=deploy_id,
            outcome=outcome.kind,
            started=len(outcome.started),
            failed=len(outcome.failed),
        )
    await queue_many(conn, messages)
