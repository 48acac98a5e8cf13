"""Planning a pod's next batch while the current one commits (eru_allocator.deploy.plan_ahead, docs/pipeline.md
"Performance"), on the in-memory store and bus: the batch decided ahead is submitted only when the pod is what it
assumed, and the decisions are those of planning the batches one after the other."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from eru.bus import new_envelope
from eru.domain import Accepted, DeployRequest, ErrorReply
from eru.planning import NodeResources, PlanningConfig
from eru.store.protocol import PodWrites, SnapshotNeeds
from eru.testing.memory_bus import InMemoryBus, serve_placement
from eru.testing.memory_store import InMemoryStore, MemoryPodSession
from eru_allocator.deploy import confirm, decision
from eru_allocator.deploy.context import Context
from eru_allocator.deploy.pipeline import commit_batch
from eru_allocator.deploy.placing import DIRECT
from eru_allocator.deploy.requests import validate
from eru_allocator.flow.batcher import Batcher

CONFIG = PlanningConfig()
WEB = {"name": "web", "image": "busybox", "resources": {"cpu_bind": True, "cpu_request": 0.5}}


class GatedStore(InMemoryStore):
    """An in-memory store whose first submit waits for `release`: the next batch runs while the first commits."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.between: Callable[[], None] | None = None  # runs while the first batch is held at its submit

    @asynccontextmanager
    async def pod(self, pod: str) -> AsyncIterator[MemoryPodSession]:
        async with super().pod(pod) as session:
            real = session.submit

            async def submit(writes: PodWrites) -> None:
                if not self.entered.is_set():
                    self.entered.set()
                    await self.release.wait()
                    if self.between is not None:
                        self.between()
                await real(writes)

            session.submit = submit  # type: ignore[method-assign]
            yield session


def _store(store: InMemoryStore) -> InMemoryStore:
    store.add_pod("p1")
    for name in ("n1", "n2", "n3"):
        store.add_node("p1", NodeResources(name, {str(core): 100 for core in range(4)}, 8 << 30))
    return store


def _items(start: int, count: int, **fields: Any) -> list[tuple[DeployRequest, Any, Any]]:
    items = []
    for index in range(start, start + count):
        req = DeployRequest.model_validate({"pod": "p1", "workload": WEB, "request_id": f"r{index}", **fields})
        items.append((req, validate(req, CONFIG), new_envelope("eru.deploy.request", "test")))
    return items


async def _overlapped(store: GatedStore, ctx: Context) -> list[Accepted | ErrorReply | Any]:
    """Batch 1 (5 requests) held at its submit while batch 2 (5 more) is submitted to the pipelined batcher."""
    batcher: Batcher[Any, Any] = Batcher(lambda pod, items: commit_batch(ctx, pod, items), max_batch=5, pipelined=True)
    first = [asyncio.create_task(batcher.submit("p1", item)) for item in _items(0, 5)]
    await store.entered.wait()
    second = [asyncio.create_task(batcher.submit("p1", item)) for item in _items(5, 5)]
    for _ in range(50):  # batch 2 decides ahead (its distributor call included) while batch 1 is held
        await asyncio.sleep(0)
    store.release.set()
    return list(await asyncio.gather(*first, *second))


def _placements(store: InMemoryStore) -> list[tuple[str, str]]:
    deploys = sorted(store.deploys.values(), key=lambda row: row.request_id)
    return [(row.request_id, row.result) for row in deploys]


def _decided(store: InMemoryStore) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    by_id = {json.loads(row.result)["decision_id"]: row.request_id for row in store.deploys.values()}
    rows = sorted(store.decisions.values(), key=lambda row: by_id[row.id])
    return [(store.decision_input(row.id), json.loads(row.output)) for row in rows]


def _context(store: InMemoryStore) -> Context:
    bus = InMemoryBus()
    serve_placement(bus)
    return Context(store, bus, CONFIG, "allocator/test", 1.0, 30.0)


async def _sequential() -> InMemoryStore:
    store = _store(InMemoryStore())
    ctx = _context(store)
    await commit_batch(ctx, "p1", _items(0, 5))
    await commit_batch(ctx, "p1", _items(5, 5))
    return store


async def test_the_next_batch_is_decided_ahead_and_decides_what_one_after_the_other_does() -> None:
    store = _store(GatedStore())
    ctx = _context(store)
    answers = await _overlapped(store, ctx)
    assert all(isinstance(answer, Accepted) for answer in answers)
    assert (ctx.line.ahead_used, ctx.line.ahead_missed) == (1, 0)
    alone = await _sequential()
    assert _decided(store) == _decided(alone)  # same inputs recorded, same plans
    assert len(store.containers) == 10
    used = {name: sum(node.resources.used_cpu_map.values()) for name, node in store.nodes.items()}
    assert used == {name: sum(node.resources.used_cpu_map.values()) for name, node in alone.nodes.items()}


async def test_a_pod_changed_meanwhile_is_decided_again_under_the_lock() -> None:
    store = _store(GatedStore())
    ctx = _context(store)

    def cordon_n1() -> None:  # while batch 1 commits, n1 leaves the schedulable nodes
        store.nodes["n1"] = dataclasses.replace(store.nodes["n1"], cordoned=True)

    store.between = cordon_n1
    answers = await _overlapped(store, ctx)
    assert all(isinstance(answer, Accepted) for answer in answers)
    assert (ctx.line.ahead_used, ctx.line.ahead_missed) == (0, 1)
    second = [row for row in store.containers.values() if row.deploy_id in _deploys_of(store, range(5, 10))]
    assert len(second) == 5
    assert all(row.node != "n1" for row in second)  # decided against the changed pod


async def test_a_request_of_the_batch_settled_meanwhile_is_answered_from_the_store() -> None:
    store = _store(GatedStore())
    ctx = _context(store)
    batcher: Batcher[Any, Any] = Batcher(lambda pod, items: commit_batch(ctx, pod, items), max_batch=5, pipelined=True)
    first = [asyncio.create_task(batcher.submit("p1", item)) for item in _items(0, 5)]
    await store.entered.wait()
    again = [asyncio.create_task(batcher.submit("p1", item)) for item in _items(3, 5)]  # r3, r4: redelivered
    for _ in range(50):
        await asyncio.sleep(0)
    store.release.set()
    answers = await asyncio.gather(*first, *again)
    assert (ctx.line.ahead_used, ctx.line.ahead_missed) == (0, 1)
    assert answers[5].deploy_id == answers[3].deploy_id
    assert answers[6].deploy_id == answers[4].deploy_id
    assert len(store.deploys) == 8
    assert len(store.containers) == 8


def _deploys_of(store: InMemoryStore, indexes: range) -> set[str]:
    keys = {f"r{index}" for index in indexes}
    return {row.id for row in store.deploys.values() if row.request_id in keys}


API = {**WEB, "name": "api"}


async def _two_workloads(store: InMemoryStore, ctx: Context, *, api_live_before: bool) -> list[Any]:
    """Optionally one `api` deploy committed first; then batch 1 of `web` held at its submit while batch 2 of `api`
    is decided ahead."""
    if api_live_before:
        assert isinstance(store, GatedStore)
        store.entered.set()  # the gate is for batch 1 below: this commit passes it
        await commit_batch(ctx, "p1", _items(90, 2, workload=API))
        store.entered.clear()
    batcher: Batcher[Any, Any] = Batcher(lambda pod, items: commit_batch(ctx, pod, items), max_batch=5, pipelined=True)
    first = [asyncio.create_task(batcher.submit("p1", item)) for item in _items(0, 5)]
    await store.entered.wait()
    second = [asyncio.create_task(batcher.submit("p1", item)) for item in _items(5, 5, workload=API)]
    for _ in range(50):
        await asyncio.sleep(0)
    store.release.set()
    return list(await asyncio.gather(*first, *second))


async def _two_workloads_sequential(*, api_live_before: bool) -> InMemoryStore:
    store = _store(InMemoryStore())
    ctx = _context(store)
    if api_live_before:
        await commit_batch(ctx, "p1", _items(90, 2, workload=API))
    await commit_batch(ctx, "p1", _items(0, 5))
    await commit_batch(ctx, "p1", _items(5, 5, workload=API))
    return store


async def test_a_batch_of_another_workload_is_decided_ahead() -> None:
    store = _store(GatedStore())
    ctx = _context(store)
    answers = await _two_workloads(store, ctx, api_live_before=False)
    assert all(isinstance(answer, Accepted) for answer in answers)
    # batch 2 (`api`, nothing live) was decided against batch 1's snapshot narrowed to `api`: it held
    assert (ctx.line.ahead_used, ctx.line.ahead_missed) == (1, 0)
    alone = await _two_workloads_sequential(api_live_before=False)
    assert _decided(store) == _decided(alone)


async def test_counts_the_previous_batch_did_not_read_are_read_before_deciding_ahead() -> None:
    """Batch 1 read only `web`'s counts; batch 2 (`api`, two instances live before) reads `api`'s without the lock
    before deciding ahead, so it still holds, and counts them."""
    store = _store(GatedStore())
    ctx = _context(store)
    answers = await _two_workloads(store, ctx, api_live_before=True)
    assert all(isinstance(answer, Accepted) for answer in answers)
    assert (ctx.line.ahead_used, ctx.line.ahead_missed) == (1, 0)
    alone = await _two_workloads_sequential(api_live_before=True)
    assert _decided(store) == _decided(alone)
    requests = sorted(row.request_id for row in store.deploys.values())
    first_api = _decided(store)[requests.index("r5")][0]
    assert _counts(first_api) == 2, "batch 2's first record counts the two api instances live before"


async def test_counts_changed_after_they_were_read_ahead_make_the_batch_decide_again() -> None:
    """One of the two `api` instances goes while batch 1 commits, after batch 2 read `api`'s counts ahead: the lock's
    snapshot differs, batch 2 is decided again and counts the one left."""
    store = _store(GatedStore())
    ctx = _context(store)

    def remove_one_api() -> None:
        gone = next(row for row in store.containers.values() if row.workload == "api")
        store.containers[gone.id] = gone._replace(state="removed")

    store.between = remove_one_api
    answers = await _two_workloads(store, ctx, api_live_before=True)
    assert all(isinstance(answer, Accepted) for answer in answers)
    assert (ctx.line.ahead_used, ctx.line.ahead_missed) == (0, 1)
    requests = sorted(row.request_id for row in store.deploys.values())
    first_api = _decided(store)[requests.index("r5")][0]
    assert _counts(first_api) == 1, "decided against the one api instance left"


def _counts(problem: dict[str, Any]) -> int:
    nodes = problem["nodes"]
    return sum(int(node.get("count", 0)) for node in nodes)


async def test_a_batch_planned_ahead_lets_the_event_loop_run_and_one_under_the_lock_does_not() -> None:
    """The batch holding the pod's lock waits for its round trips in the same event loop as the next batch's
    planning: planning ahead yields every `AHEAD_YIELD_EVERY` requests; under the lock it runs straight through."""
    store = _store(InMemoryStore())
    ctx = _context(store)
    items = _items(0, 2 * decision.AHEAD_YIELD_EVERY + 1)
    keys = [req.request_id or "" for req, _, _ in items]
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    async with store.pod("p1") as session:
        snapshot = await session.snapshot(SnapshotNeeds(CONFIG, 30.0))

    async def planned(session: Any) -> int:
        nonlocal ticks
        ticks = 0
        policy = confirm.policy_of({})
        answers: list[Any] = []
        await decision.plan_batch(ctx, session, "p1", snapshot, items, keys, {}, policy, DIRECT, answers)
        assert all(isinstance(answer, Accepted) for answer in answers)
        return ticks

    running = asyncio.create_task(ticker())
    try:
        assert await planned(None) == 2  # ahead: after requests 8 and 16
        async with store.pod("p1") as session:
            assert await planned(session) == 0
    finally:
        running.cancel()
