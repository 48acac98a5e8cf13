"""The keeper's rules (eru_allocator.containers.keep_count) on the in-memory store's kept instances capability
(`eru.store.kept`), in milliseconds: a kept instance lost with its node waits the base delay and is then asked for
again (a deploy request of one, `keep-<lineage>-<generation>`), placed when that deploy has a container; an instance
evicted as often as allowed is given up. The contract suite (tests/integration/store/test_kept_contract.py) proves
the fake answers as PostgreSQL does.
"""

from __future__ import annotations

import json

from eru.bus import new_envelope
from eru.bus.subjects import DEPLOY_REQUEST
from eru.colocation.backoff import KeepConfig
from eru.domain import ContainerEvent
from eru.planning import NodeResources
from eru.store.protocol import ContainerRow, DeployRow, PodWrites
from eru.testing.memory_store import InMemoryStore
from eru_allocator.containers.events import EventContext, apply_events
from eru_allocator.containers.keep_count import EVICTED_MARK, Keeper

POD = "cp"
REQUEST = {
    "pod": POD,
    "workload": {"name": "job", "image": "busybox", "priority_class": "batch"},
    "count": 1,
    "keep": True,
}


def _row(cid: str, deploy_id: str) -> ContainerRow:
    return ContainerRow(
        cid, deploy_id, "n1", POD, "job", "busybox", "acme", "batch", 0, '{"cpu_map": {}}', "{}", "running", "{}", None
    )


async def _store() -> tuple[InMemoryStore, EventContext]:
    store = InMemoryStore()
    store.add_pod(POD)
    store.add_node(POD, NodeResources("n1", {"0": 100}, 1 << 30))
    deploy = DeployRow("d1", "k1", POD, "acme", "completed", json.dumps(REQUEST), "{}")
    async with store.pod(POD) as session:
        await session.submit(PodWrites(deploys=[deploy], containers=[_row("c1", "d1")]))
    return store, EventContext("allocator/test", store, store)


async def _event(ctx: EventContext, cid: str, kind: str, reason: str) -> None:
    event = ContainerEvent(node="n1", container_id=cid, deploy_id="d1", kind=kind, reason=reason)
    await apply_events(ctx, [([event], new_envelope(f"eru.container.{kind}", "agent/test"))])


def _requests(store: InMemoryStore) -> list[str]:
    return [m.message.request_id for m in store.outbox if m.subject == DEPLOY_REQUEST]  # type: ignore[attr-defined]


async def test_a_lost_instance_waits_the_base_delay_then_is_asked_for_again_and_placed() -> None:
    store, ctx = await _store()
    keeper = Keeper(store, "allocator/test", KeepConfig(replace_base_seconds=30.0))
    assert await keeper.round()
    await _event(ctx, "c1", "lost", "node n1 down")
    await keeper.round()
    assert _requests(store) == []
    [row] = store.kept_state.rows.values()
    assert (row.state, row.due_at) == ("waiting", 30.0)
    store.now = 31.0
    await keeper.round()
    assert _requests(store) == ["keep-c1-1"]
    replacement = DeployRow("d2", "keep-c1-1", POD, "acme", "completed", "{}", "{}")
    async with store.pod(POD) as session:
        await session.submit(PodWrites(deploys=[replacement], containers=[_row("k1", "d2")]))
    await keeper.round()
    assert (row := store.kept_state.rows["c1"]).state == "running"
    assert row.container_id == "k1"


async def test_an_instance_evicted_as_often_as_allowed_is_given_up() -> None:
    store, ctx = await _store()
    keeper = Keeper(store, "allocator/test", KeepConfig(max_evictions=1))
    await keeper.round()
    await _event(ctx, "c1", "removed", f"evicted:{EVICTED_MARK}x1)")
    await keeper.round()
    assert store.kept_state.rows["c1"].state == "gave_up"
    assert _requests(store) == []
    assert [(e.instance, e.workload) for e in store.evictions] == [("c1", "job")]
