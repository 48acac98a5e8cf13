"""Containers' health reports → the ledger (docs/node-agent.md "Health and node TTL").

A node agent reports a container's health check when it changes (`ContainerEvent` kind `health`: starting, healthy,
unhealthy). Health is not a state of the container's life (`lifecycle.py`): it moves no resources and finishes no
deploy, so these events bypass the event batches and are written here, one statement per message, onto the
container's `health` column (migration 0210) — only while the container is live and on the node that reported it.
A repeated or late report writes the same or an older word; the agent reports every change, so the newest wins.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from eru.domain import ContainerEvent
from eru.store.container_events import ContainerEventStore, HealthReport

log = structlog.get_logger()


def split_health(events: Sequence[ContainerEvent]) -> tuple[list[ContainerEvent], list[ContainerEvent]]:
    """(health reports, every other event) in their order."""
    health = [event for event in events if event.kind == "health"]
    return health, [event for event in events if event.kind != "health"]


async def record_health(store: ContainerEventStore, events: Sequence[ContainerEvent]) -> None:
    """Write each reported health onto its container's row."""
    reports = [event for event in events if event.health is not None]
    if not reports:
        return
    await store.record_health(
        [HealthReport(event.container_id, event.node, event.health) for event in reports if event.health]
    )
    for event in reports:
        if event.health == "unhealthy":
            log.warning("container.unhealthy", container_id=event.container_id, node=event.node)
