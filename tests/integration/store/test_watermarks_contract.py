"""The watermark overrides capability's contract (`eru.store.watermarks.WatermarkStore`, docs/store.md "The contract
suite"), run against the in-memory store (`eru.testing.memory_store`) and against `PgWatermarks` on a real
PostgreSQL: an override stored with its version and its message queued, the layers a change is validated with, a
refusal that changes nothing, an unknown node or pod, and every override listed for a resync.

Pods `cp` (nodes n1, n2) and `edge` (node e1) are arranged through the nodes capability.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest
import pytest_asyncio

from eru.bus import new_envelope
from eru.domain.messages import SetNodeRequest, WatermarkOverride
from eru.errors import InvalidInput
from eru.planning import NodeResources
from eru.store.pool import create_pool
from eru.store.protocol import OutboxMessage
from eru.store.watermarks import NodeOverride, OverrideLayers, StoredOverride, WatermarkStore
from eru.testing.memory_store import InMemoryStore
from eru_allocator.nodes.registry import set_node
from eru_allocator.store.node_store import PgNodes
from eru_allocator.store.watermark_store import PgWatermarks

CORES = {"0": 100, "1": 100}
MEMORY = 4 << 30
LAYOUT = [("cp", "n1"), ("cp", "n2"), ("edge", "e1")]


@dataclass
class Backend:
    """A store under contract and what it queued in its outbox (subject, message id), in order."""

    name: str
    watermarks: WatermarkStore
    queued: Callable[[], Awaitable[list[tuple[str, str]]]]


@pytest_asyncio.fixture
async def backend(database: str | None) -> AsyncIterator[Backend]:
    """The in-memory store, then PostgreSQL on the test's database."""
    if database is None:
        store = InMemoryStore()
        for pod, name in LAYOUT:
            store.add_pod(pod)
            store.add_node(pod, NodeResources(name, dict(CORES), MEMORY))

        async def queued() -> list[tuple[str, str]]:
            return [(message.subject, message.envelope.id) for message in store.outbox]

        yield Backend("memory", store, queued)
        return
    pool = await create_pool(database, min_size=1, max_size=4)
    try:
        for pod, name in LAYOUT:
            await set_node(PgNodes(pool), SetNodeRequest(node=name, pod=pod, cpu_map=dict(CORES), memory=MEMORY))

        async def pg_queued() -> list[tuple[str, str]]:
            rows = await pool.fetch("SELECT subject, event_id FROM outbox ORDER BY id")
            return [(row["subject"], row["event_id"]) for row in rows]

        yield Backend("postgres", PgWatermarks(pool), pg_queued)
    finally:
        await pool.close()


def _message(stored: StoredOverride) -> OutboxMessage:
    body = WatermarkOverride(scope=stored.scope, name=stored.name, settings=stored.settings, version=stored.version)
    envelope = new_envelope(
        "eru.watermarks.changed", "test", message_id=f"w-{stored.scope}-{stored.name}-{stored.version}"
    )
    return OutboxMessage(f"eru.watermarks.{stored.scope}.{stored.name}", body, envelope)


def _setting(settings: dict[str, int]) -> Callable[[OverrideLayers], dict[str, int]]:
    return lambda layers: {**layers.current, **settings}


async def test_an_override_is_stored_with_its_version_and_its_message(backend: Backend) -> None:
    first = await backend.watermarks.change_override("node", "n1", _setting({"cpu_high": 80}), _message)
    second = await backend.watermarks.change_override("node", "n1", _setting({"cpu_low": 40}), _message)
    assert first == StoredOverride("node", "n1", {"cpu_high": 80}, 1)
    assert second == StoredOverride("node", "n1", {"cpu_high": 80, "cpu_low": 40}, 2)
    assert await backend.queued() == [
        ("eru.watermarks.node.n1", "w-node-n1-1"),
        ("eru.watermarks.node.n1", "w-node-n1-2"),
    ]


async def test_a_change_sees_the_layers_it_combines_with(backend: Backend) -> None:
    await backend.watermarks.change_override("pod", "cp", _setting({"cpu_high": 90}), _message)
    await backend.watermarks.change_override("node", "n2", _setting({"cpu_high": 70}), _message)
    seen: list[OverrideLayers] = []

    def record(layers: OverrideLayers) -> dict[str, int]:
        seen.append(layers)
        return dict(layers.current)

    await backend.watermarks.change_override("node", "n1", record, _message)
    await backend.watermarks.change_override("pod", "cp", record, _message)
    assert seen == [
        OverrideLayers("cp", {}, pod_override={"cpu_high": 90}),
        OverrideLayers(
            "cp", {"cpu_high": 90}, node_overrides=[NodeOverride("n1", {}), NodeOverride("n2", {"cpu_high": 70})]
        ),
    ]


async def test_a_refused_change_writes_nothing(backend: Backend) -> None:
    await backend.watermarks.change_override("pod", "edge", _setting({"cpu_high": 90}), _message)

    def refuse(layers: OverrideLayers) -> dict[str, int]:
        raise InvalidInput("set.cpu_high", "refused")

    with pytest.raises(InvalidInput):
        await backend.watermarks.change_override("pod", "edge", refuse, _message)
    assert await backend.watermarks.overrides() == [StoredOverride("pod", "edge", {"cpu_high": 90}, 1)]
    assert await backend.queued() == [("eru.watermarks.pod.edge", "w-pod-edge-1")]


async def test_an_unknown_node_or_pod_changes_nothing(backend: Backend) -> None:
    assert await backend.watermarks.change_override("node", "nope", _setting({"cpu_high": 80}), _message) is None
    assert await backend.watermarks.change_override("pod", "n1", _setting({"cpu_high": 80}), _message) is None
    assert await backend.watermarks.overrides() == []
    assert await backend.queued() == []


async def test_every_override_is_listed_by_scope_and_name_cleared_ones_kept(backend: Backend) -> None:
    await backend.watermarks.change_override("pod", "edge", _setting({"cpu_high": 90}), _message)
    await backend.watermarks.change_override("node", "n2", _setting({"cpu_high": 70}), _message)
    await backend.watermarks.change_override("node", "e1", _setting({"cpu_high": 60}), _message)
    await backend.watermarks.change_override("node", "e1", lambda layers: {}, _message)
    assert await backend.watermarks.overrides() == [
        StoredOverride("node", "e1", {}, 2),
        StoredOverride("node", "n2", {"cpu_high": 70}, 1),
        StoredOverride("pod", "edge", {"cpu_high": 90}, 1),
    ]
