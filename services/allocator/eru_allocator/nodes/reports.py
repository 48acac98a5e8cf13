"""What nodes report besides container events (docs/node-agent.md): conditions, registrations, inventories and
heartbeats, each written in batches (one transaction per batch; a bad registration fails alone, before it joins one).

`app.Allocator` holds one `NodeReports`; its node report consumers call the `on_*` handlers.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import structlog

from eru.bus import Delivery, Envelope
from eru.domain import Heartbeat, NodeHeartbeats, NodeRegistration
from eru.domain.colocation import NodeCondition
from eru.domain.inventory import NodeInventories, NodeInventory
from eru.nodeagent import group_inventories
from eru.nodeagent.heartbeats import UnknownBeats, check_group
from eru.reconcile import ReconcilePolicy
from eru.store.nodes import NodeStore
from eru_allocator.containers.events import EventContext
from eru_allocator.flow.batcher import Batcher
from eru_allocator.nodes import registry
from eru_allocator.nodes.groups import COMMAND_GROUPS
from eru_allocator.nodes.reconciler import on_inventories

log = structlog.get_logger()

# registrations written per transaction (and in flight): 5,000 nodes registering at once (docs/performance.md)
REGISTRATION_BATCH = 256


class NodeReports:
    """Node report handlers, each over its batcher (reports that arrive together are written together)."""

    def __init__(
        self, nodes: NodeStore, event_ctx: EventContext, reconcile_policy: ReconcilePolicy, reconcile: bool
    ) -> None:
        self.nodes = nodes
        self.event_ctx = event_ctx
        self.reconcile_policy = reconcile_policy
        self.reconcile = reconcile  # settings.reconcile.enabled
        # heartbeats and conditions arriving together are written in one statement each (docs/store.md "Node status")
        self.heartbeat_batcher: Batcher[Heartbeat, bool] = Batcher(self._write_heartbeats, max_batch=1024)
        self.condition_batcher: Batcher[NodeCondition, None] = Batcher(self._write_conditions, max_batch=512)
        self.inventory_batcher: Batcher[NodeInventory, None] = Batcher(self._write_inventories, max_batch=64)
        self.registration_batcher: Batcher[NodeRegistration, None] = Batcher(
            self._write_registrations, max_batch=REGISTRATION_BATCH
        )
        self.unknown = UnknownBeats()
        # an allocator starts knowing no group (in-process test stacks would otherwise inherit an earlier one's)
        COMMAND_GROUPS.forget()

    async def on_condition(self, condition: NodeCondition, _envelope: Envelope, _delivery: Delivery) -> None:
        """A node condition (`eru.node.<node>.condition`), written with the others that arrive with it."""
        await self.condition_batcher.submit("conditions", condition)

    async def _write_conditions(self, _key: object, conditions: Sequence[NodeCondition]) -> list[None]:
        await registry.record_conditions(self.nodes, conditions)
        return [None for _ in conditions]

    async def on_register(self, registration: NodeRegistration, _envelope: Envelope, _delivery: Delivery) -> None:
        """A node registration, checked alone and then written in a batch of registrations."""
        registry.check_registration(registration)  # a bad one fails alone, before it joins a batch
        await self.registration_batcher.submit("registrations", registration)

    async def _write_registrations(self, _key: object, registrations: Sequence[NodeRegistration]) -> list[None]:
        await registry.register_many(self.nodes, registrations)
        return [None for _ in registrations]

    async def on_inventory(self, inventory: NodeInventory, _envelope: Envelope, _delivery: Delivery) -> None:
        """A node inventory, reconciled with the ledger together with the others that arrive with it."""
        await self.inventory_batcher.submit("inventories", inventory)

    async def _write_inventories(self, _key: object, inventories: Sequence[NodeInventory]) -> list[None]:
        await on_inventories(self.event_ctx, inventories, self.reconcile_policy, self.reconcile)
        return [None for _ in inventories]

    async def on_heartbeat(self, beat: Heartbeat, _envelope: Envelope, _delivery: Delivery) -> None:
        """A heartbeat, written with the others that arrive with it; an unknown node's is noted (`unknown`)."""
        known = await self.heartbeat_batcher.submit("heartbeats", beat)
        self._note_unknown([beat.node], {beat.node} if known else set())

    async def on_group_inventories(self, message: NodeInventories, _envelope: Envelope, delivery: Delivery) -> None:
        """The inventories a sim process's nodes took since its last flush (`eru.inventories.<group>`), kept and
        reconciled as one batch. A message of another group than its subject's, or naming a node that is not the
        group's, is refused whole naming the field: a process speaks only for its own nodes."""
        group_inventories.check_group(message, _subject_group(delivery.subject))
        await on_inventories(self.event_ctx, message.inventories, self.reconcile_policy, self.reconcile)

    async def on_group_heartbeats(self, beats: NodeHeartbeats, _envelope: Envelope, delivery: Delivery) -> None:
        """The heartbeats of a sim process's nodes (`eru.heartbeats.<group>`), written in one statement. A message
        of another group than its subject's, or a node that is not the group's (`<group>` or `<group>-<number>`), is
        refused naming the field: a process speaks only for its own nodes."""
        check_group(beats, _subject_group(delivery.subject))
        known = await registry.heartbeats(self.nodes, beats.beats)
        if beats.group_batches:  # their creates go in one message per group (nodes.groups)
            COMMAND_GROUPS.heard(beats.group, known)
        self._note_unknown([beat.node for beat in beats.beats], known)

    def _note_unknown(self, nodes: Sequence[str], known: set[str]) -> None:
        """Count the beats of nodes the ledger does not know (yet: a registration is written in a batch, a node's
        first beats may come before it); at most one line a minute (`node.heartbeats_unknown`), never one per node."""
        summary = self.unknown.seen(nodes, known, time.monotonic())
        if summary is not None:
            log.info(
                "node.heartbeats_unknown",
                beats=summary.beats,
                nodes=summary.nodes,
                lasting=summary.lasting,
                examples=list(summary.examples),
            )

    async def _write_heartbeats(self, _key: object, beats: Sequence[Heartbeat]) -> list[bool]:
        known = await registry.heartbeats(self.nodes, beats)
        return [beat.node in known for beat in beats]


def _subject_group(subject: str) -> str:
    """The group of `eru.heartbeats.<group>` or `eru.inventories.<group>`."""
    return subject.split(".", 2)[2]
