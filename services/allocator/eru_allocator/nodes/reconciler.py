"""The ledger reconciled with what nodes really run (docs/operations.md "Reconciling the ledger").

Each node agent publishes its inventory at start and every `ERU_INVENTORY_SECONDS`; one allocator replica (the
durable consumer shares them out) keeps the newest per node and reconciles it: the pure `eru.reconcile.reconcile`
decides, this module applies. Everything it does is idempotent, so replicas reconciling the same node at once (an
inventory and `eru reconcile`) do it once: lost and removed marks go through `events.apply_events` under fixed
message ids (the inbox drops a repeat, the row locks order them), commands carry ids derived from the inventory (the
agent runs a command id once).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

import structlog

from eru.bus import new_envelope
from eru.bus.subjects import node_command
from eru.domain import ContainerEvent, NodeCommand
from eru.domain.inventory import NodeInventory, ReconcileRequest
from eru.domain.messages import OperationReply
from eru.domain.resources import Allocation
from eru.reconcile import GONE, Finding, LedgerRow, ReconcilePolicy, reconcile
from eru.store import transaction
from eru_allocator.containers.events import EventContext, apply_events
from eru_allocator.delivery.outbox import queue_many

log = structlog.get_logger()
NAMESPACE = uuid.UUID("0b7f51b6-3f4e-4d0e-9a55-0c2a1e0de013")

LEDGER_SQL = f"""
SELECT c.id, c.state, extract(epoch FROM c.updated_at)::float8 AS updated_at, c.allocation, c.class,
       EXISTS (SELECT 1 FROM containers r WHERE r.replaces = c.id AND r.state IN ('planned', 'creating')) AS pending
  FROM containers c
 WHERE c.node = $1 AND (c.state NOT IN ({", ".join(f"'{s}'" for s in sorted(GONE))}) OR c.id = ANY($2::text[]))
"""
# A batch of inventories kept in one statement (rows in node order: replicas' batches never deadlock); the nodes
# whose inventory was kept come back (an older one arriving late is not).
STORE_MANY_SQL = """
INSERT INTO node_inventories (node, agent, taken_at, body)
SELECT node, agent, taken_at, body::jsonb FROM unnest($1::text[], $2::text[], $3::float8[], $4::text[])
       AS u (node, agent, taken_at, body) ORDER BY node
ON CONFLICT (node) DO UPDATE SET agent = EXCLUDED.agent, taken_at = EXCLUDED.taken_at, body = EXCLUDED.body,
                                 received_at = now()
 WHERE node_inventories.taken_at < EXCLUDED.taken_at
RETURNING node
"""
NODE_CORES_SQL = "SELECT name, cpu_map FROM nodes WHERE name = ANY($1::text[])"
LEDGERS_SQL = f"""
SELECT c.node, c.id, c.state, extract(epoch FROM c.updated_at)::float8 AS updated_at, c.allocation, c.class,
       EXISTS (SELECT 1 FROM containers r WHERE r.replaces = c.id AND r.state IN ('planned', 'creating')) AS pending
  FROM containers c
 WHERE c.node = ANY($1::text[])
   AND (c.state NOT IN ({", ".join(f"'{s}'" for s in sorted(GONE))}) OR c.id = ANY($2::text[]))
"""
INVENTORIES_SQL = """
SELECT i.node, i.body, extract(epoch FROM now() - i.received_at)::float8 AS age
  FROM node_inventories i JOIN nodes n ON n.name = i.node
 WHERE ($1::text IS NULL OR i.node = $1) AND ($2::text IS NULL OR n.pod = $2)
 ORDER BY i.node
"""


async def reconcile_node(
    ctx: EventContext, inventory: NodeInventory, policy: ReconcilePolicy, *, dry_run: bool
) -> list[Finding]:
    """The differences between the ledger and one inventory; unless `dry_run`, the policy's actions are applied."""
    cpu_map = await ctx.pool.fetchval("SELECT cpu_map FROM nodes WHERE name = $1", inventory.node)
    if cpu_map is None:
        return []  # not registered yet: nothing in the ledger can be on it
    rows = await ctx.pool.fetch(LEDGER_SQL, inventory.node, _listed(inventory))
    return await _reconciled(ctx, inventory, _cores(cpu_map), [_ledger_row(row) for row in rows], policy, dry_run)


def _listed(inventory: NodeInventory) -> list[str]:
    return [entry.container_id for entry in inventory.containers if entry.managed]


def _cores(cpu_map: Any) -> list[str]:
    return list(json.loads(cpu_map) if isinstance(cpu_map, str) else cpu_map)


def _ledger_row(row: Any) -> LedgerRow:
    return LedgerRow(
        container_id=row["id"],
        state=row["state"],
        updated_at=row["updated_at"],
        allocation=json.loads(row["allocation"]) if isinstance(row["allocation"], str) else row["allocation"],
        priority_class=row["class"],
        pending_replacement=row["pending"],
    )


async def _reconciled(
    ctx: EventContext,
    inventory: NodeInventory,
    node_cores: list[str],
    ledger: list[LedgerRow],
    policy: ReconcilePolicy,
    dry_run: bool,
) -> list[Finding]:
    findings = reconcile(inventory, ledger, node_cores, policy)
    if findings:
        log.info(
            "reconcile.findings",
            node=inventory.node,
            dry_run=dry_run,
            **{kind: sum(1 for f in findings if f.kind == kind) for kind in sorted({f.kind for f in findings})},
        )
    if not dry_run:
        await _apply(ctx, inventory, findings, {row.container_id: row for row in ledger})
    return findings


async def on_inventories(
    ctx: EventContext, inventories: Sequence[NodeInventory], policy: ReconcilePolicy, enabled: bool
) -> dict[str, list[Finding]]:
    """Inventories from the bus, a batch at once: kept in one statement, then each node whose inventory was kept is
    reconciled (unless reconciliation is off) against its ledger, read for all of them in one query. Each node's
    findings (returned by node) are exactly `reconcile_node`'s."""
    newest: dict[str, NodeInventory] = {}
    for inventory in inventories:  # one per node: the newest of the batch
        kept = newest.get(inventory.node)
        if kept is None or kept.taken_at < inventory.taken_at:
            newest[inventory.node] = inventory
    batch = [newest[node] for node in sorted(newest)]
    stored = await ctx.pool.fetch(
        STORE_MANY_SQL,
        [i.node for i in batch],
        [i.agent for i in batch],
        [i.taken_at for i in batch],
        [i.model_dump_json() for i in batch],
    )
    if not enabled or not stored:
        return {}
    kept_nodes = sorted(row["node"] for row in stored)
    cores = {row["name"]: _cores(row["cpu_map"]) for row in await ctx.pool.fetch(NODE_CORES_SQL, kept_nodes)}
    nodes = [node for node in kept_nodes if node in cores]  # a node not registered yet has nothing in the ledger
    listed = {node: set(_listed(newest[node])) for node in nodes}
    rows = await ctx.pool.fetch(LEDGERS_SQL, nodes, sorted(set().union(*listed.values())))
    ledgers: dict[str, list[LedgerRow]] = {node: [] for node in nodes}
    for row in rows:
        # as LEDGER_SQL of that node alone: a gone container only when that node's own inventory lists it
        if row["state"] not in GONE or row["id"] in listed[row["node"]]:
            ledgers[row["node"]].append(_ledger_row(row))
    return {
        node: await _reconciled(ctx, newest[node], cores[node], ledgers[node], policy, dry_run=False) for node in nodes
    }


async def _apply(
    ctx: EventContext, inventory: NodeInventory, findings: Sequence[Finding], ledger: dict[str, LedgerRow]
) -> None:
    marks = []
    for finding in findings:
        if finding.action not in ("mark_lost", "mark_removed"):
            continue
        kind = "lost" if finding.action == "mark_lost" else "removed"
        event = ContainerEvent(
            node=inventory.node, container_id=finding.container_id, kind=kind, reason=f"reconcile: {finding.detail}"
        )
        # one id per container and mark: every replica and every later inventory applies it at most once
        envelope = new_envelope(
            f"eru.container.{kind}", ctx.source, message_id=f"reconcile:{kind}:{finding.container_id}"
        )
        marks.append(([event], envelope))
    if marks:
        await apply_events(ctx, marks)
    commands = []
    for finding in findings:
        if finding.action not in ("remove", "reapply"):
            continue
        key = f"{inventory.node}/{inventory.agent}/{inventory.taken_at!r}/{finding.container_id}/{finding.action}"
        command_id = f"reconcile-{uuid.uuid5(NAMESPACE, key)}"
        if finding.action == "remove":
            command = NodeCommand(
                command_id=command_id,
                node=inventory.node,
                kind="remove",
                container_id=finding.container_id,
                reason=f"reconcile: {finding.detail}",
            )
        else:
            allocation = Allocation.model_validate(dict(ledger[finding.container_id].allocation))
            command = NodeCommand(
                command_id=command_id,
                node=inventory.node,
                kind="update",
                container_id=finding.container_id,
                allocation=allocation,
                reason=f"reconcile: {finding.detail}",
            )
        envelope = new_envelope(
            f"eru.node.cmd.{command.kind}", ctx.source, correlation_id=finding.container_id, message_id=command_id
        )
        commands.append((node_command(inventory.node, command.kind), command, envelope))
    if commands:
        async with transaction(ctx.pool) as conn:
            await queue_many(conn, commands)


async def on_inventory(ctx: EventContext, inventory: NodeInventory, policy: ReconcilePolicy, enabled: bool) -> None:
    """An inventory from the bus: kept, then reconciled (unless reconciliation is off or a newer one is kept)."""
    await on_inventories(ctx, [inventory], policy, enabled)


async def reconcile_request(
    ctx: EventContext, request: ReconcileRequest, policy: ReconcilePolicy, stale_after_seconds: float
) -> OperationReply:
    """`eru reconcile`: every selected node's newest inventory against the ledger (applied unless a dry run)."""
    rows = await ctx.pool.fetch(INVENTORIES_SQL, request.node, request.pod)
    findings: list[Finding] = []
    warnings = []
    for row in rows:
        body = json.loads(row["body"]) if isinstance(row["body"], str) else row["body"]
        inventory = NodeInventory.model_validate(body)
        if row["age"] > stale_after_seconds:
            warnings.append(f"node {row['node']}: its newest inventory is {row['age']:.0f}s old (is its agent up?)")
        findings += await reconcile_node(ctx, inventory, policy, dry_run=request.dry_run)
    if request.node is not None and not rows:
        warnings.append(f"node {request.node}: no inventory yet (its agent publishes one at start)")
    verb = "would be" if request.dry_run else "were"
    acted = sum(1 for f in findings if f.action != "report")
    message = f"{len(rows)} nodes compared, {len(findings)} differences, {acted} {verb} acted on"
    return OperationReply(message=message, warnings=warnings, rows=[f.as_row() for f in findings])
