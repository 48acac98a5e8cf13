"""Containers' health reports onto the ledger (docs/node-agent.md "Health and node TTL") on the in-memory store's
container events capability: the health events of a node's report written, the other events left to the batches."""

from __future__ import annotations

from eru.domain import ContainerEvent
from eru.store.protocol import ContainerRow
from eru.store.queries import ContainerFilter
from eru.testing.memory_store import InMemoryStore
from eru_allocator.health.reports import record_health, split_health


async def test_health_reports_reach_the_container_row() -> None:
    store = InMemoryStore()
    for cid in ("c1", "c2"):
        store.containers[cid] = ContainerRow(
            cid, "d1", "n1", "p1", "w", "busybox", "acme", "prod", 0, "{}", "{}", "running", "{}", None
        )
    events = [
        ContainerEvent(node="n1", container_id="c1", kind="health", health="unhealthy"),
        ContainerEvent(node="n1", container_id="c2", kind="started"),
        ContainerEvent(node="n1", container_id="c2", kind="health", health="starting"),
    ]
    health, others = split_health(events)
    assert [e.kind for e in others] == ["started"]
    await record_health(store, health)
    page = await store.container_page(ContainerFilter(pod="p1"), None, 10)
    assert {row.id: row.health for row in page} == {"c1": "unhealthy", "c2": "starting"}
