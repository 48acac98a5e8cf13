"""Watermark overrides set live (docs/colocation.md "Watermarks set live") on the in-memory store: a change is
validated with every layer it combines with and either stored whole (its message queued for the eviction replicas)
or refused naming the layer, the field and the rule, with nothing changed."""

from __future__ import annotations

import pytest

from eru.domain.messages import WatermarkRequest
from eru.errors import InvalidInput, NotFound
from eru.planning import NodeResources
from eru.testing.memory_store import InMemoryStore
from eru_allocator.nodes.watermarks import set_watermarks, stored_overrides

ENVIRONMENT = {"watermarks": {"cpu_forbid": 45, "cpu_suppress": 60, "cpu_evict": 80}, "pods": {}, "nodes": {}}


def _store() -> InMemoryStore:
    store = InMemoryStore()
    store.add_pod("p1")
    for name in ("n1", "n2"):
        store.add_node("p1", NodeResources(name, {"0": 100}, 1 << 30))
    return store


async def test_an_accepted_change_is_stored_and_announced() -> None:
    store = _store()
    reply = await set_watermarks(
        store, ENVIRONMENT, "test", WatermarkRequest(scope="node", name="n1", set={"cpu_suppress": 50})
    )
    assert reply.message == "node n1 watermarks: cpu_suppress=50"
    assert await stored_overrides(store) == [
        {"scope": "node", "name": "n1", "settings": {"cpu_suppress": 50}, "version": 1}
    ]
    assert [(m.subject, m.envelope.id) for m in store.outbox] == [("eru.watermarks.node.n1", "watermarks-node-n1-1")]


async def test_a_pod_change_that_breaks_a_nodes_override_is_refused_and_changes_nothing() -> None:
    store = _store()
    await set_watermarks(
        store, ENVIRONMENT, "test", WatermarkRequest(scope="node", name="n2", set={"cpu_suppress": 70})
    )
    with pytest.raises(InvalidInput) as caught:
        await set_watermarks(
            store, ENVIRONMENT, "test", WatermarkRequest(scope="pod", name="p1", set={"cpu_evict": 65})
        )
    assert caught.value.field == "node.n2.cpu_suppress", caught.value.reason
    assert "must be at least cpu_suppress (70)" in caught.value.reason
    assert [o["name"] for o in await stored_overrides(store)] == ["n2"]
    assert len(store.outbox) == 1


async def test_an_unknown_node_is_not_found() -> None:
    with pytest.raises(NotFound):
        await set_watermarks(
            _store(), ENVIRONMENT, "test", WatermarkRequest(scope="node", name="n9", set={"cpu_evict": 90})
        )
