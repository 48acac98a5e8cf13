"""Node agents' container events → container states, returned resources, and each deploy's terminal event.

Events are applied in batches, one transaction per batch (events.Batcher): the inbox marks (a repeat is skipped),
row locks in a fixed order (deploys by id, then containers by id, then node usage by node name — so replicas never
deadlock), the state changes applied in stream order to the rows in memory (`container_batch.py`), the usage
returned per node, and for every deploy touched whose containers have all reported, its terminal event
(`deploy_outcomes.py`). Deploy rows are locked, so exactly one transaction sees a deploy's last pending container
and emits its terminal event. Containers no agent answered for fail here too (`fail_overdue`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import structlog

from eru.bus import Envelope, new_envelope, new_id
from eru.bus.codec import encode_value
from eru.bus.protocol import Bus
from eru.bus.subjects import container_event, node_command, tenant_container_event
from eru.domain import ContainerEvent, NodeCommand
from eru.fairness.ledger import parent_of
from eru.store import transaction
from eru.store.transaction import Connection
from eru_allocator import records
from eru_allocator.container_batch import ContainerBatch
from eru_allocator.deploy_outcomes import finish_deploys
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
# The deploys of the batch's containers (and of their pending replacements), locked in id order.
LOCK_DEPLOYS_SQL = """
SELECT id, status FROM deploys
 WHERE id IN (SELECT deploy_id FROM containers WHERE id = ANY($1::text[]) OR replaces = ANY($1::text[]))
 ORDER BY id FOR NO KEY UPDATE
"""


@dataclass(frozen=True)
class EventContext:
    """What the event handler needs from the running service."""

    pool: asyncpg.Pool
    source: str
    bus: Bus | None = None  # tells each tenant about its containers' changes (`notify_tenants`); None in tests


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
        batch = ContainerBatch(table, successors)
        for event, _ in todo:
            batch.apply(event)
        await _write(conn, batch)
        await _remove_strays(ctx, conn, batch.strays)
        await _announce_lost(ctx, conn, batch.lost)
        await finish_deploys(
            ctx.source,
            conn,
            [deploy_id for deploy_id, status in sorted(statuses.items()) if status == "planned"],
            {event.deploy_id: envelope for event, envelope in todo if event.deploy_id},
            batch.progress,
        )
    await notify_tenants(ctx.bus, [batch.rows[cid] for cid in sorted(batch.dirty)])
    return [None] * len(items)


async def notify_tenants(bus: Bus | None, rows: Sequence[dict[str, Any]]) -> None:
    """After commit: each changed container to its tenant's `eru.t.<tenant>.container.<id>.<state>` (core NATS,
    best effort: the record is PostgreSQL; this is for a tenant's watchers, who may not read `eru.container.>`)."""
    if bus is None:
        return
    for row in rows:
        with contextlib.suppress(Exception):  # a tenant name that is no subject token has no watchers
            subject = tenant_container_event(parent_of(row["tenant"]), row["id"], row["state"])
            await bus.publish(subject, encode_value(state_change(row)))


def state_change(row: dict[str, Any]) -> dict[str, Any]:
    """A container row's `ContainerStateChange` as it travels (built as a dict: one per container of a batch, from
    columns the store already holds)."""
    return {"container_id": row["id"], "deploy_id": row["deploy_id"], "state": row["state"], "reason": row["reason"]}


async def _write(conn: Connection, batch: ContainerBatch) -> None:
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
