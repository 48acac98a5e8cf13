"""Node agents' container events → container states, returned resources, and each deploy's terminal event.

Events are applied in batches, one transaction per batch (events.Batcher): the inbox marks (a repeat is skipped),
row locks in a fixed order (deploys by id, then containers by id, then node usage by node name — so replicas never
deadlock), the state changes applied in stream order to the rows in memory (`containers/event_batch.py`), the usage
returned per node, and for every deploy touched whose containers have all reported, its terminal event
(`deploy_outcomes.py`). Deploy rows are locked, so exactly one transaction sees a deploy's last pending container
and emits its terminal event. A batch is four round trips: BEGIN, one call that marks, locks and reads
(`eru_open_event_batch`), one statement that writes (plus the node usage when resources come back), COMMIT.
Containers no agent answered for fail here too (`fail_overdue`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from eru.bus import Envelope, new_envelope, new_id
from eru.bus.codec import encode_value
from eru.bus.protocol import Bus
from eru.bus.subjects import container_event, node_command, tenant_container_event
from eru.domain import ContainerEvent, NodeCommand
from eru.fairness.ledger import parent_of
from eru.store.container_events import ContainerEventStore, EventBatchWrite, EventRow
from eru.store.nodes import NodeStore
from eru.store.plans import total_usage
from eru.store.protocol import OutboxMessage
from eru_allocator.containers.deploy_outcomes import Finished, finish_deploys, members_after
from eru_allocator.containers.event_batch import ContainerBatch
from eru_allocator.delivery.publisher import CommittedPublisher
from eru_allocator.flow.batcher import next_batch_may_start

log = structlog.get_logger()

INBOX = "allocator-container-events"


@dataclass(frozen=True)
class EventContext:
    """What the event handler needs from the running service: the source of its envelopes and the store's
    capabilities it goes through: container events (`events`) and nodes (`nodes`: the reconciler's inventories,
    ledgers and commands)."""

    source: str
    events: ContainerEventStore
    nodes: NodeStore
    bus: Bus | None = None  # tells each tenant about its containers' changes (`notify_tenants`); None in tests
    # publishes a batch's outbox rows right after its commit (eru_allocator.delivery.publisher); None: the relays do
    publisher: CommittedPublisher | None = None

    @property
    def store(self) -> ContainerEventStore:
        """The container events store."""
        return self.events

    @property
    def node_store(self) -> NodeStore:
        """The nodes store."""
        return self.nodes


Report = tuple[Sequence[ContainerEvent], Envelope]  # the events one message carried (one, or a node's batch)


async def apply_events(ctx: EventContext, items: Sequence[Report]) -> list[None]:
    """Apply the container events of a batch of messages in one transaction, each message exactly once: one round
    trip opens it (marks, locks, reads), the state machine runs in memory, one statement writes the result (plus the
    node usage when resources come back)."""
    # sorted: two batches holding the same redelivered ids must wait for each other's inbox rows in one order
    messages = sorted({envelope.id for _, envelope in items})
    containers = [(event.container_id, envelope.id) for events, envelope in items for event in events]
    started = time.perf_counter()
    async with ctx.store.event_batch(INBOX, messages, containers) as session:
        opened = session.opened
        open_seconds = time.perf_counter() - started
        todo = [(event, envelope) for events, envelope in items if envelope.id in opened.fresh for event in events]
        if not todo:
            return [None] * len(items)
        statuses, placements, table = opened.deploy_states, opened.placements, opened.rows
        successors = {
            r.replaces: r.id for r in table.values() if r.replaces is not None and r.state in ("planned", "creating")
        }
        batch = ContainerBatch(table, successors)
        for event, _ in todo:
            batch.apply(event)
        planned = [deploy_id for deploy_id, status in sorted(statuses.items()) if status == "planned"]
        finished = finish_deploys(
            ctx.source,
            members_after(planned, opened.members, batch.rows),
            placements,
            {event.deploy_id: envelope for event, envelope in todo if event.deploy_id},
            batch.progress,
        )
        messages_out = [*_stray_removals(ctx, batch.strays), *_lost_announcements(ctx, batch.lost), *finished.messages]
        hold = ctx.publisher.hold_seconds if ctx.publisher is not None else None
        queued = await session.write(_changes(batch, finished, messages_out, hold))
        written = time.perf_counter()
        # every lock is taken: the next batch may start while this one commits (a batch touching the same rows waits
        # for the commit, one that does not goes ahead; docs/pipeline.md step 6)
        next_batch_may_start()
    committed = time.perf_counter()
    if ctx.publisher is not None and queued:
        tenants = {row.deploy_id: row.tenant for row in batch.rows.values() if row.deploy_id}
        await ctx.publisher.publish([m for m in messages_out if m.envelope.id in queued], tenants)
    log.debug(  # where an events batch spends its time (docs/performance.md "Steady rate")
        "events.batch",
        messages=len(items),
        events=len(todo),
        open_seconds=round(open_seconds, 4),
        write_seconds=round(written - started - open_seconds, 4),
        commit_seconds=round(committed - written, 4),
        total_seconds=round(time.perf_counter() - started, 4),
    )
    await notify_tenants(ctx.bus, [batch.rows[cid] for cid in sorted(batch.dirty)])
    return [None] * len(items)


async def notify_tenants(bus: Bus | None, rows: Sequence[EventRow]) -> None:
    """After commit: each changed container to its tenant's `eru.t.<tenant>.container.<id>.<state>` (core NATS,
    best effort: the record is PostgreSQL; this is for a tenant's watchers, who may not read `eru.container.>`)."""
    if bus is None:
        return
    for row in rows:
        with contextlib.suppress(Exception):  # a tenant name that is no subject token has no watchers
            subject = tenant_container_event(parent_of(row.tenant), row.id, row.state)
            await bus.publish(subject, encode_value(state_change(row)))


def state_change(row: EventRow) -> dict[str, Any]:
    """A container row's `ContainerStateChange` as it travels (built as a dict: one per container of a batch, from
    columns the store already holds)."""
    return {"container_id": row.id, "deploy_id": row.deploy_id, "state": row.state, "reason": row.reason}


def _changes(
    batch: ContainerBatch, finished: Finished, messages: list[OutboxMessage], hold: float | None
) -> EventBatchWrite:
    """What the batch changed, as the store writes it."""
    # Most events only move a container's state (planned → running): those rows are written without rewriting
    # their JSON columns, which PostgreSQL would otherwise parse again for every row.
    return EventBatchWrite(
        moved=[batch.rows[cid] for cid in sorted(batch.dirty - batch.reshaped)],
        reshaped=[batch.rows[cid] for cid in sorted(batch.reshaped)],
        finished=finished.statuses,
        messages=messages,
        hold=hold,
        usage={node: total_usage(usages) for node, usages in batch.usage.items()},
    )


def _stray_removals(ctx: EventContext, strays: list[EventRow]) -> list[OutboxMessage]:
    messages = []
    for row in strays:
        command_id = new_id()
        command = NodeCommand(
            command_id=command_id,
            node=row.node,
            kind="remove",
            container_id=row.id,
            reason=f"started after it was {row.state} ({row.reason or 'no reason'})",
        )
        envelope = new_envelope(
            "eru.node.cmd.remove", ctx.source, correlation_id=row.deploy_id or row.id, message_id=command_id
        )
        messages.append(OutboxMessage(node_command(row.node, "remove"), command, envelope))
        log.warning("container.stray_removed", container_id=row.id, node=row.node, state=row.state)
    return messages


def _lost_announcements(ctx: EventContext, lost: list[tuple[EventRow, ContainerEvent]]) -> list[OutboxMessage]:
    """`eru.container.<node>.lost` for each container marked lost, with the transaction that marked it."""
    messages = []
    for row, event in lost:
        envelope = new_envelope(
            "eru.container.lost",
            ctx.source,
            correlation_id=row.deploy_id or row.id,
            message_id=f"lost:{row.id}",
        )
        announced = event.model_copy(update={"deploy_id": row.deploy_id, "node": row.node})
        messages.append(OutboxMessage(container_event(row.node, "lost"), announced, envelope))
        log.warning("container.lost", container_id=row.id, node=row.node, reason=event.reason)
    return messages


async def fail_overdue(ctx: EventContext, timeout_seconds: float) -> int:
    """Containers no node agent answered for within `timeout_seconds` fail (resources returned, deploys finish).

    Applied as `failed` events with a fixed id per container, so replicas sweeping together apply each once; a late
    `started` from the agent is then answered with a `remove`.
    """
    items = []
    for row in await ctx.store.overdue(timeout_seconds):
        reason = f"no answer from node {row.node} within {timeout_seconds:g}s"
        event = ContainerEvent(
            node=row.node, container_id=row.id, deploy_id=row.deploy_id, kind="failed", reason=reason
        )
        envelope = new_envelope("eru.container.failed", ctx.source, message_id=f"overdue:{row.id}")
        items.append(([event], envelope))
    if items:
        await apply_events(ctx, items)
        log.warning("containers.overdue", count=len(items), timeout=timeout_seconds)
    return len(items)
