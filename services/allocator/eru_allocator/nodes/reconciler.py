"""The ledger reconciled with what nodes really run (docs/operations.md "Reconciling the ledger").

Each node agent publishes its inventory at start and every `ERU_INVENTORY_SECONDS`; one allocator replica (the
durable consumer shares them out) keeps the newest per node and reconciles it: the pure `eru.reconcile.reconcile`
decides, this module applies. Everything it does is idempotent, so replicas reconciling the same node at once (an
inventory and `eru reconcile`) do it once: lost and removed marks go through `events.apply_events` under fixed
message ids (the inbox drops a repeat, the row locks order them), commands carry ids derived from the inventory (the
agent runs a command id once).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import structlog

from eru.bus import new_envelope
from eru.bus.subjects import node_command
from eru.domain import ContainerEvent, NodeCommand
from eru.domain.inventory import NodeInventory, ReconcileRequest
from eru.domain.messages import OperationReply
from eru.domain.resources import Allocation
from eru.reconcile import Finding, LedgerRow, ReconcilePolicy, reconcile
from eru.store.protocol import OutboxMessage
from eru_allocator.containers.events import EventContext, apply_events

log = structlog.get_logger()
NAMESPACE = uuid.UUID("0b7f51b6-3f4e-4d0e-9a55-0c2a1e0de013")


async def reconcile_node(
    ctx: EventContext, inventory: NodeInventory, policy: ReconcilePolicy, *, dry_run: bool
) -> list[Finding]:
    """The differences between the ledger and one inventory; unless `dry_run`, the policy's actions are applied."""
    cores = (await ctx.nodes.node_cores([inventory.node])).get(inventory.node)
    if cores is None:
        return []  # not registered yet: nothing in the ledger can be on it
    ledger = (await ctx.nodes.ledgers({inventory.node: set(_listed(inventory))}))[inventory.node]
    return await _reconciled(ctx, inventory, cores, ledger, policy, dry_run)


def _listed(inventory: NodeInventory) -> list[str]:
    return [entry.container_id for entry in inventory.containers if entry.managed]


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
    kept_nodes = await ctx.nodes.keep_inventories(batch)
    if not enabled or not kept_nodes:
        return {}
    cores = await ctx.nodes.node_cores(kept_nodes)
    nodes = [node for node in kept_nodes if node in cores]  # a node not registered yet has nothing in the ledger
    ledgers = await ctx.nodes.ledgers({node: set(_listed(newest[node])) for node in nodes})
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
        commands.append(OutboxMessage(node_command(inventory.node, command.kind), command, envelope))
    if commands:
        await ctx.node_store.queue_commands(commands)


async def on_inventory(ctx: EventContext, inventory: NodeInventory, policy: ReconcilePolicy, enabled: bool) -> None:
    """An inventory from the bus: kept, then reconciled (unless reconciliation is off or a newer one is kept)."""
    await on_inventories(ctx, [inventory], policy, enabled)


async def reconcile_request(
    ctx: EventContext, request: ReconcileRequest, policy: ReconcilePolicy, stale_after_seconds: float
) -> OperationReply:
    """`eru reconcile`: every selected node's newest inventory against the ledger (applied unless a dry run)."""
    rows = await ctx.nodes.kept_inventories(request.node, request.pod)
    findings: list[Finding] = []
    warnings = []
    for row in rows:
        if row.age_seconds > stale_after_seconds:
            warnings.append(f"node {row.node}: its newest inventory is {row.age_seconds:.0f}s old (is its agent up?)")
        findings += await reconcile_node(ctx, row.inventory, policy, dry_run=request.dry_run)
    if request.node is not None and not rows:
        warnings.append(f"node {request.node}: no inventory yet (its agent publishes one at start)")
    verb = "would be" if request.dry_run else "were"
    acted = sum(1 for f in findings if f.action != "report")
    message = f"{len(rows)} nodes compared, {len(findings)} differences, {acted} {verb} acted on"
    return OperationReply(message=message, warnings=warnings, rows=[f.as_row() for f in findings])
