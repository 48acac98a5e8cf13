"""A node whose heartbeats stopped for its TTL (`allocator.node_down_after_seconds`) is down: its containers are
marked `lost` (docs/node-agent.md "Health and node TTL").

The node itself shows `down` wherever nodes are read (eru_allocator.nodes.registry) and takes nothing new; here its
live containers go `lost` through the ordinary event path (`events.apply_events`: resources returned,
`eru.container.<node>.lost` announced), each as an event with a fixed id (`down:<container id>`), so replicas
sweeping together apply each once. A kept workload's lost instances are then placed again elsewhere by the keeper
(eru_allocator.containers.keep_count), with its back-off. An agent that comes back with such a container still
running is answered with a `remove` (a container started after it was given up, eru_allocator.containers.event_batch).
"""

from __future__ import annotations

import structlog

from eru.bus import new_envelope
from eru.domain import ContainerEvent
from eru_allocator.containers.events import EventContext, Report, apply_events

log = structlog.get_logger()


def lost_reason(node: str, silent_seconds: float, ttl_seconds: float) -> str:
    """Why a down node's container is lost, with the numbers."""
    return f"node {node} down: no heartbeat for {silent_seconds:.0f}s (TTL {ttl_seconds:g}s)"


async def mark_down_lost(ctx: EventContext, ttl_seconds: float) -> int:
    """Mark the live containers of every node silent for `ttl_seconds` `lost`; how many were marked."""
    # Acknowledged containers only: one still planned or creating on a silent node fails by its own timeout
    # (`events.fail_overdue`); a pending replacement goes with its predecessor.
    silent = await ctx.store.on_silent_nodes(ttl_seconds)
    items: list[Report] = []
    for container in silent:
        event = ContainerEvent(
            node=container.node,
            container_id=container.id,
            deploy_id=container.deploy_id,
            kind="lost",
            reason=lost_reason(container.node, container.silent_seconds, ttl_seconds),
        )
        envelope = new_envelope("eru.container.lost", ctx.source, message_id=f"down:{container.id}")
        items.append(([event], envelope))
    if items:
        await apply_events(ctx, items)
        nodes = sorted({container.node for container in silent})
        log.warning("nodes.down", nodes=nodes, lost=len(items), ttl=ttl_seconds)
    return len(items)
