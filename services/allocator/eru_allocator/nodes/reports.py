"""What nodes report besides container events (docs/node-agent.md): conditions, registrations, inventories and
heartbeats, each written in batches (one transaction per batch; a bad registration fails alone, before it joins one).

A mixin of `app.Allocator`: the handlers its consumers call, over the batchers and contexts the allocator builds.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg
import structlog

from eru.bus import Delivery, Envelope
from eru.domain import Heartbeat, NodeRegistration
from eru.domain.colocation import NodeCondition
from eru.domain.inventory import NodeInventory
from eru.reconcile import ReconcilePolicy
from eru.settings import Settings
from eru_allocator.containers.events import EventContext
from eru_allocator.flow.batcher import Batcher
from eru_allocator.nodes import registry
from eru_allocator.nodes.reconciler import on_inventories

log = structlog.get_logger()


class NodeReports:
    """Node report handlers; the allocator sets every attribute below before its consumers start."""

    pool: asyncpg.Pool
    settings: Settings
    event_ctx: EventContext
    reconcile_policy: ReconcilePolicy
    heartbeat_batcher: Batcher[Heartbeat, bool]
    condition_batcher: Batcher[NodeCondition, None]
    inventory_batcher: Batcher[NodeInventory, None]
    registration_batcher: Batcher[NodeRegistration, None]

    async def _on_condition(self, condition: NodeCondition, _envelope: Envelope, _delivery: Delivery) -> None:
        await self.condition_batcher.submit("conditions", condition)

    async def _write_conditions(self, _key: object, conditions: Sequence[NodeCondition]) -> list[None]:
        await registry.record_conditions(self.pool, conditions)
        return [None for _ in conditions]

    async def _on_register(self, registration: NodeRegistration, _envelope: Envelope, _delivery: Delivery) -> None:
        registry.check_registration(registration)  # a bad one fails alone, before it joins a batch
        await self.registration_batcher.submit("registrations", registration)

    async def _write_registrations(self, _key: object, registrations: Sequence[NodeRegistration]) -> list[None]:
        await registry.register_many(self.pool, registrations)
        return [None for _ in registrations]

    async def _on_inventory(self, inventory: NodeInventory, _envelope: Envelope, _delivery: Delivery) -> None:
        await self.inventory_batcher.submit("inventories", inventory)

    async def _write_inventories(self, _key: object, inventories: Sequence[NodeInventory]) -> list[None]:
        await on_inventories(self.event_ctx, inventories, self.reconcile_policy, self.settings.reconcile.enabled)
        return [None for _ in inventories]

    async def _on_heartbeat(self, beat: Heartbeat, _envelope: Envelope, _delivery: Delivery) -> None:
        if not await self.heartbeat_batcher.submit("heartbeats", beat):
            log.info("node.heartbeat_unknown", node=beat.node)

    async def _write_heartbeats(self, _key: object, beats: Sequence[Heartbeat]) -> list[bool]:
        known = await registry.heartbeats(self.pool, beats)
        return [beat.node in known for beat in beats]
