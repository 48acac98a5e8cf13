"""Node agents' container events → container states, returned resources, and each deploy's terminal event.

Events are applied in batches, one transaction per batch (events.Batcher): the inbox marks (a repeat is skipped),
row locks in a fixed order (deploys by id, then containers by id, then node usage by node name — so replicas never
deadlock), the state changes applied in stream order to the rows in memory, the usage returned per node, and for
every deploy touched whose containers have all reported, its terminal event. Deploy rows are locked, so exactly one
transaction sees a deploy's last pending container and emits its terminal event.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from eru.bus import Envelope, encode, new_envelope, new_id
from eru.bus.subjects import container_event, deploy_event, node_command, tenant_container_event
from eru.domain import ContainerEvent, DeployEvent, NodeCommand
from eru.domain.messages import ContainerStateChange
from eru.fairness.ledger import parent_of
from eru.store import transaction
from eru.store.protocol import Usage
from eru.store.transaction import Connection
from eru_allocator import records
from eru_allocator.lifecycle import GONE_STATES, Outcome, deploy_outcome, holds_resources, transition
from eru_allocator.outbox import queue_many

log = structlog.get_logger()

INBOX = "allocator-container-events"
COLUMNS = "id, deploy_id, node, state, reason, allocation, previous_allocation, resources, replaces, tenant"
MARK_SQL = """
WITH marked AS (
    INSERT INTO inbox (consumer, message_id) SELECT $1, unnest($2::text[])
    ON CONFLICT (consumer, message_id) DO NOTHING RETURNING message_id
)
SELECT coalesce(array_agg(message_id), '{}') FROM marked
"""
# One statement for the whole batch (the rows are already locked, in id order, by the SELECT … FOR UPDATE).
UPDATE_SQL = """
UPDATE containers AS c
   SET state = u.state, reason = u.reason, allocation = u.allocation::jsonb,
       previous_allocation = u.previous_allocation::jsonb, resources = u.resources::jsonb, replaces = u.replaces
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
       AS u (id, state, reason, allocation, previous_allocation, resources, replaces)
 WHERE c.id = u.id
"""
UPDATE_STATE_SQL = """
UPDATE containers AS c SET state = u.state, reason = u.reason
  FROM unnest($1::text[], $2::text[], $3::text[]) AS u (id, state, reason)
 WHERE c.id = u.id
"""
STATE_COLUMNS = frozenset({"state", "reason"})
# The deploys of the batch's containers (and of their pending replacements), locked in id order.
LOCK_DEPLOYS_SQL = """
SELECT id, status FROM deploys
 WHERE id IN (SELECT deploy_id FROM containers WHERE id = ANY($1::text[]) OR replaces = ANY($1::text[]))
 ORDER BY id FOR NO KEY UPDATE
"""
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


@dataclass(frozen=True)
class EventContext:
    """What the event handler needs from the running service."""

    pool: Any
    source: str
    nc: Any = None  # tells each tenant about its containers' changes (`notify_tenants`); None in tests


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


class _Batch:
    """The rows one batch works on, changed in memory and written back at the end."""

    def __init__(self, rows: dict[str, dict[str, Any]], successors: dict[str, str]) -> None:
        self.rows = rows
        self.successors = successors  # old container id → its pending replacement's id
        self.dirty: set[str] = set()
        self.reshaped: set[str] = set()  # rows whose allocation, resources or replaces changed too
        self.usage: dict[str, list[Usage]] = {}
        self.strays: list[dict[str, Any]] = []  # containers that started after they were given up: to be removed
        self.lost: list[tuple[dict[str, Any], ContainerEvent]] = []  # marked lost: announced on the bus
        # per deploy, what reported in this batch (for `progress` events): started ids, failed id → reason
        self.progress: dict[str, tuple[list[str], dict[str, str]]] = {}

    def give_back(self, row: dict[str, Any], allocation: dict[str, Any], sign: int = -1) -> None:
        usage = records.allocation_usage(allocation)
        if sign < 0:
            usage = Usage(
                {k: -v for k, v in usage.cpu_map.items()}, -usage.memory, {k: -v for k, v in usage.numa_memory.items()}
            )
        self.usage.setdefault(row["node"], []).append(usage)

    def set(self, row: dict[str, Any], **changes: Any) -> None:
        row.update(changes)
        self.dirty.add(row["id"])
        if not changes.keys() <= STATE_COLUMNS:
            self.reshaped.add(row["id"])

    def apply(self, event: ContainerEvent) -> None:
        row = self.rows.get(event.container_id)
        if row is None:
            log.info("container.event.unknown", container_id=event.container_id, node=event.node, kind=event.kind)
            return
        if row["replaces"] is not None:
            if row["state"] not in ("planned", "creating"):
                return
            # a replacement waits for the decisive event: replaced (success) or failed/removed (rolled back)
            if event.kind == "replaced":
                self._replaced(row)
            elif event.kind in ("failed", "removed"):
                self.set(row, state="failed", reason=event.reason or event.kind)
                old = self.rows.get(row["replaces"])
                if old is not None and old["state"] in ("paused", "updating"):
                    self.set(old, state="running")
            return
        successor = self.successors.get(row["id"])
        if successor is not None and self.rows[successor]["state"] in ("planned", "creating"):
            if event.kind in ("replaced", "removed"):
                self._replaced(self.rows[successor])
            return
        if event.kind != "replaced":
            self._transition(row, event)

    def _replaced(self, replacement: dict[str, Any]) -> None:
        """The new container runs with the old one's allocation (no charge moves); the old one is gone."""
        old_id = replacement["replaces"]
        self.set(replacement, state="running", replaces=None, reason=f"replaces {old_id}")
        old = self.rows.get(old_id)
        if old is not None and old["state"] not in GONE_STATES:
            self.set(old, state="removed", reason=f"replaced by {replacement['id']}")

    def _transition(self, row: dict[str, Any], event: ContainerEvent) -> None:
        change = transition(row["state"], event.kind, updating=row["previous_allocation"] is not None)
        if change is None:
            if row["state"] in GONE_STATES and event.kind == "started":
                self.strays.append(row)  # it holds nothing on our books any more: it must not run either
            return
        allocation = _loads(row["allocation"])
        previous = _loads(row["previous_allocation"])
        if change.restore_previous and previous is not None:
            # the node agent refused the update: the old allocation (and requirement) stay, so does the old charge
            previous = dict(previous)
            resources = previous.pop("resources", None)
            self.give_back(row, allocation)
            self.give_back(row, previous, sign=1)
            self.set(
                row,
                state=change.state,
                reason=event.reason or "update failed",
                allocation=json.dumps(previous),
                previous_allocation=None,
                resources=json.dumps(resources) if resources else row["resources"],
            )
            return
        if change.releases and holds_resources(row["state"], False):
            self.give_back(row, allocation)
        if change.state == "lost":
            self.lost.append((row, event))
        if row["deploy_id"] is not None and row["state"] in ("planned", "creating"):
            started, failed = self.progress.setdefault(row["deploy_id"], ([], {}))
            if change.state == "running":
                started.append(row["id"])
            elif change.state in ("failed", "removed"):
                failed[row["id"]] = event.reason or change.state
        clear = change.clear_previous or change.releases
        self.set(
            row,
            state=change.state,
            reason=event.reason or row["reason"],
            previous_allocation=None if clear else row["previous_allocation"],
        )


Report = tuple[Sequence[ContainerEvent], Envelope]  # the events one message carried (one, or a node's batch)


async def apply_events(ctx: EventContext, items: Sequence[Report]) -> list[None]:
    """Apply the container events of a batch of messages in one transaction, each message exactly once."""
    async with transaction(ctx.pool) as conn:
        # sorted: two batches holding the same redelivered ids must wait for each other's inbox rows in one order
        fresh = set(await conn.fetchval(MARK_SQL, INBOX, sorted({envelope.id for _, envelope in items})))
        todo = [(event, envelope) for events, envelope in items if envelope.id in fresh for event in events]
        if not todo:
            return [None] * len(items)
        ids = sorted({event.container_id for event, _ in todo})
        statuses = {row["id"]: row["status"] for row in await conn.fetch(LOCK_DEPLOYS_SQL, ids)}
        rows = await conn.fetch(
            f"""SELECT {COLUMNS} FROM containers
                 WHERE id = ANY($1::text[])
                    OR (replaces = ANY($1::text[]) AND state IN ('planned', 'creating'))
                 ORDER BY id FOR NO KEY UPDATE""",
            ids,
        )
        old_ids = [row["replaces"] for row in rows if row["replaces"] is not None and row["replaces"] not in ids]
        if old_ids:
            rows = [
                *rows,
                *await conn.fetch(
                    f"SELECT {COLUMNS} FROM containers WHERE id = ANY($1::text[]) ORDER BY id FOR NO KEY UPDATE",
                    old_ids,
                ),
            ]
        table = {row["id"]: dict(row) for row in rows}
        successors = {
            r["replaces"]: r["id"]
            for r in table.values()
            if r["replaces"] is not None and r["state"] in ("planned", "creating")
        }
        batch = _Batch(table, successors)
        for event, _ in todo:
            batch.apply(event)
        await _write(conn, batch)
        await _remove_strays(ctx, conn, batch.strays)
        await _announce_lost(ctx, conn, batch.lost)
        await _finish_deploys(
            ctx,
            conn,
            [deploy_id for deploy_id, status in sorted(statuses.items()) if status == "planned"],
            {event.deploy_id: envelope for event, envelope in todo if event.deploy_id},
            batch.progress,
        )
    await notify_tenants(ctx.nc, [batch.rows[cid] for cid in sorted(batch.dirty)])
    return [None] * len(items)


async def notify_tenants(nc: Any, rows: Sequence[dict[str, Any]]) -> None:
    """After commit: each changed container to its tenant's `eru.t.<tenant>.container.<id>.<state>` (core NATS,
    best effort: the record is PostgreSQL; this is for a tenant's watchers, who may not read `eru.container.>`)."""
    if nc is None:
        return
    for row in rows:
        with contextlib.suppress(Exception):  # a tenant name that is no subject token has no watchers
            change = ContainerStateChange(
                container_id=row["id"], deploy_id=row["deploy_id"], state=row["state"], reason=row["reason"]
            )
            subject = tenant_container_event(parent_of(row["tenant"]), row["id"], row["state"])
            await nc.publish(subject, encode(change))


async def _write(conn: Connection, batch: _Batch) -> None:
    # Most events only move a container's state (planned → running): those rows are written without rewriting
    # their JSON columns, which PostgreSQL would otherwise parse again for every row.
    moved = [batch.rows[cid] for cid in sorted(batch.dirty - batch.reshaped)]
    if moved:
        await conn.execute(
            UPDATE_STATE_SQL, [r["id"] for r in moved], [r["state"] for r in moved], [r["reason"] for r in moved]
        )
    if batch.reshaped:
        rows = [batch.rows[cid] for cid in sorted(batch.reshaped)]
        await conn.execute(
            UPDATE_SQL,
            [r["id"] for r in rows],
            [r["state"] for r in rows],
            [r["reason"] for r in rows],
            [_text(r["allocation"]) for r in rows],
            [_text(r["previous_allocation"]) for r in rows],
            [_text(r["resources"]) for r in rows],
            [r["replaces"] for r in rows],
        )
    # node rows locked in name order, as every other writer does
    await records.change_usages(conn, {node: records.total_usage(usages) for node, usages in batch.usage.items()}, 1)


async def _remove_strays(ctx: EventContext, conn: Connection, strays: list[dict[str, Any]]) -> None:
    messages = []
    for row in strays:
        command_id = new_id()
        command = NodeCommand(
            command_id=command_id,
            node=row["node"],
            kind="remove",
            container_id=row["id"],
            reason=f"started after it was {row['state']} ({row['reason'] or 'no reason'})",
        )
        envelope = new_envelope(
            "eru.node.cmd.remove", ctx.source, correlation_id=row["deploy_id"] or row["id"], message_id=command_id
        )
        messages.append((node_command(row["node"], "remove"), command, envelope))
        log.warning("container.stray_removed", container_id=row["id"], node=row["node"], state=row["state"])
    await queue_many(conn, messages)


async def _announce_lost(
    ctx: EventContext, conn: Connection, lost: list[tuple[dict[str, Any], ContainerEvent]]
) -> None:
    """`eru.container.<node>.lost` for each container marked lost, with the transaction that marked it."""
    messages = []
    for row, event in lost:
        envelope = new_envelope(
            "eru.container.lost",
            ctx.source,
            correlation_id=row["deploy_id"] or row["id"],
            message_id=f"lost:{row['id']}",
        )
        announced = event.model_copy(update={"deploy_id": row["deploy_id"], "node": row["node"]})
        messages.append((container_event(row["node"], "lost"), announced, envelope))
        log.warning("container.lost", container_id=row["id"], node=row["node"], reason=event.reason)
    await queue_many(conn, messages)


PENDING_SQL = """
SELECT id, node, deploy_id FROM containers
 WHERE state IN ('planned', 'creating') AND replaces IS NULL
   AND updated_at < now() - make_interval(secs => $1)
 ORDER BY id LIMIT 1000
"""


async def fail_overdue(ctx: EventContext, timeout_seconds: float) -> int:
    """Containers no node agent answered for within `timeout_seconds` fail (resources returned, deploys finish).

    Applied as `failed` events with a fixed id per container, so replicas sweeping together apply each once; a late
    `started` from the agent is then answered with a `remove`.
    """
    rows = await ctx.pool.fetch(PENDING_SQL, float(timeout_seconds))
    items = []
    for row in rows:
        reason = f"no answer from node {row['node']} within {timeout_seconds:g}s"
        event = ContainerEvent(
            node=row["node"], container_id=row["id"], deploy_id=row["deploy_id"], kind="failed", reason=reason
        )
        envelope = new_envelope("eru.container.failed", ctx.source, message_id=f"overdue:{row['id']}")
        items.append(([event], envelope))
    if items:
        await apply_events(ctx, items)
        log.warning("containers.overdue", count=len(items), timeout=timeout_seconds)
    return len(items)


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value)


async def _finish_deploys(
    ctx: EventContext,
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
    messages = []
    for deploy_id in sorted(members):
        outcome = done.get(deploy_id)
        if outcome is None:
            if deploy_id in progress:
                started, failed = progress[deploy_id]
                update = DeployEvent(deploy_id=deploy_id, kind="progress", started=sorted(started), failed=failed)
                envelope = new_envelope(
                    "eru.deploy.progress", ctx.source, correlation_id=deploy_id, causation=causes.get(deploy_id)
                )
                messages.append((deploy_event(deploy_id, "progress"), update, envelope))
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
            f"eru.deploy.{outcome.kind}", ctx.source, correlation_id=deploy_id, causation=causes.get(deploy_id)
        )
        messages.append((deploy_event(deploy_id, outcome.kind), event, envelope))
        log.info(
            "deploy.finished",
            deploy_id=deploy_id,
            outcome=outcome.kind,
            started=len(outcome.started),
            failed=len(outcome.failed),
        )
    await queue_many(conn, messages)
