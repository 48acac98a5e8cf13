"""The admission pass (eru_allocator/deploy/admission_pass.py, docs/fairness-and-scoring.md "Waiting for admission")
on the in-memory store and bus (eru.testing), in milliseconds: a request that finds no room waits; a pass records
why it still waits (the tenant's limit), admits it when room appears and its limit allows, fails it with
`tenant_limit` when its demand alone is over a lowered limit, and with `wait_expired` when its deadline passes; the
admission loop is woken by a wait submitted to the store. The contract suite
(tests/integration/store/test_waits_contract.py) holds the fake to PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from fractions import Fraction
from typing import Any

from eru.bus import new_envelope
from eru.domain import Accepted, DeployRequest
from eru.fairness.drf import Tenant
from eru.planning import NodeResources, PlanningConfig
from eru.testing.memory_bus import InMemoryBus, serve_placement
from eru.testing.memory_store import InMemoryStore
from eru_allocator.deploy.admission_pass import admit_pod, run_admission
from eru_allocator.deploy.context import Context
from eru_allocator.deploy.pipeline import commit_batch
from eru_allocator.deploy.requests import validate

CONFIG = PlanningConfig()
GIB = 1 << 30
POD = "p1"


def _store() -> tuple[InMemoryStore, Context]:
    """A pod with one 2-core node, tenant `team` without a limit."""
    store = InMemoryStore()
    store.add_pod(POD)
    store.add_tenant(Tenant("team"))
    _add_node(store, "n1")
    bus = InMemoryBus()
    serve_placement(bus)
    return store, Context(store, bus, CONFIG, "allocator/test", 1.0, 30.0)


def _add_node(store: InMemoryStore, name: str) -> None:
    store.add_node(POD, NodeResources(name, {"0": 100, "1": 100}, 8 * GIB))


async def _deploy(ctx: Context, key: str, *, cores: int = 2, wait: float = 0.0) -> str:
    workload = {
        "name": key,
        "image": "busybox",
        "tenant": "team",
        "resources": {"cpu_bind": True, "cpu_request": cores},
    }
    req = DeployRequest.model_validate({"pod": POD, "request_id": key, "workload": workload, "wait_seconds": wait})
    item = (req, validate(req, CONFIG), new_envelope("eru.deploy.request", "test"))
    (answer,) = await commit_batch(ctx, POD, [item])
    assert isinstance(answer, Accepted), answer
    return answer.deploy_id


def _reason(store: InMemoryStore, deploy_id: str) -> dict[str, Any]:
    (wait,) = [row for row in store.waits if row.deploy_id == deploy_id]
    reason: dict[str, Any] = json.loads(wait.reason)
    return reason


def _failed_events(store: InMemoryStore, deploy_id: str) -> list[Any]:
    return [m.message for m in store.outbox if m.subject.endswith(f"{deploy_id}.failed")]


async def test_a_waiting_request_is_held_by_its_limit_then_admitted_when_room_and_limit_allow() -> None:
    store, ctx = _store()
    await _deploy(ctx, "first")  # the node's two cores
    late = await _deploy(ctx, "late", wait=30.0)
    assert store.deploys[late].status == "waiting"
    assert _reason(store, late)["code"] == "insufficient_capacity", "no room at arrival"
    assert await admit_pod(ctx, store, POD) == (0, 0), "nothing freed: it keeps waiting"
    assert _reason(store, late)["code"] == "capacity", "the pass's reason"

    store.add_tenant(Tenant("team", limit={"cpu": Fraction(3)}))  # 2 held + 2 asked > 3
    _add_node(store, "n2")  # room appears, but the limit holds the request back
    assert await admit_pod(ctx, store, POD) == (0, 0)
    reason = _reason(store, late)
    assert reason["code"] == "limit", reason
    assert store.deploys[late].status == "waiting"

    store.add_tenant(Tenant("team", limit={"cpu": Fraction(4)}))
    assert await admit_pod(ctx, store, POD) == (1, 0)
    assert store.waits == []
    assert store.deploys[late].status in ("planned", "completed")
    assert [row.node for row in store.containers.values() if row.deploy_id == late] == ["n2"]
    assert not await store.waiting_pods()


async def test_a_wait_whose_demand_alone_is_over_a_lowered_limit_fails_with_tenant_limit() -> None:
    store, ctx = _store()
    await _deploy(ctx, "first")
    late = await _deploy(ctx, "late", wait=30.0)
    store.add_tenant(Tenant("team", limit={"cpu": Fraction(1)}))  # lowered below the request's 2 cores
    assert await admit_pod(ctx, store, POD) == (0, 1)
    assert store.waits == []
    deploy = store.deploys[late]
    assert deploy.status == "failed"
    error = json.loads(deploy.result)["error"]
    assert error["code"] == "tenant_limit"
    assert "limit 1" in error["message"]
    assert "decision_id" in json.loads(deploy.result)
    (event,) = _failed_events(store, late)
    assert event.error.code == "tenant_limit"


async def test_a_wait_past_its_deadline_fails_naming_its_wait_and_last_reason() -> None:
    store, ctx = _store()
    await _deploy(ctx, "first")
    late = await _deploy(ctx, "late", wait=5.0)
    store.now += 4.0
    assert await admit_pod(ctx, store, POD) == (0, 0), "not yet"
    assert _reason(store, late)["code"] == "capacity", "the pass's reason, in its words"
    store.now += 1.0
    assert await admit_pod(ctx, store, POD) == (0, 1)
    deploy = store.deploys[late]
    assert deploy.status == "failed"
    (event,) = _failed_events(store, late)
    assert event.error.code == "wait_expired"
    assert event.error.message.startswith("not admitted within wait_seconds=5")
    assert event.error.details["code"] == "capacity", "the last reason it waited"
    assert store.waits == []


async def test_a_removed_tenant_fails_its_waits() -> None:
    store, ctx = _store()
    await _deploy(ctx, "first")
    late = await _deploy(ctx, "late", wait=30.0)
    del store.tenants["team"]
    assert await admit_pod(ctx, store, POD) == (0, 1)
    (event,) = _failed_events(store, late)
    assert (event.error.code, event.error.message) == ("invalid_input", "tenant 'team' was removed")


async def test_the_admission_loop_is_woken_by_a_submitted_wait() -> None:
    store, ctx = _store()
    await _deploy(ctx, "first")
    passes = 0
    ended = asyncio.Condition()
    real = store.next_deadline

    async def counted() -> float | None:  # the loop asks it after each pass
        nonlocal passes
        left = await real()
        passes += 1
        async with ended:
            ended.notify_all()
        return left

    async def after(count: int) -> None:
        async with ended:
            await asyncio.wait_for(ended.wait_for(lambda: passes >= count), 5.0)

    store.next_deadline = counted  # type: ignore[method-assign]
    stopping = asyncio.Event()
    loop = asyncio.create_task(run_admission(ctx, store, store, stopping, poll_seconds=3600.0))  # no timer wakes it
    try:
        await after(1)  # the first pass, over nothing
        late = await _deploy(ctx, "late", wait=30.0)  # no room: it waits, and wakes the loop
        await after(2)
        assert _reason(store, late)["code"] == "capacity", "the pass's reason"
        _add_node(store, "n2")  # room appears (memory wakes no loop for a node)
        more = await _deploy(ctx, "more", wait=30.0)  # queued behind `late`: a wait, which wakes the loop
        assert _reason(store, more)["code"] == "queued"
        await after(3)
        assert store.deploys[late].status in ("planned", "completed")
        assert store.deploys[more].status == "waiting", "n2 holds one of them"
        assert _reason(store, more)["code"] == "capacity"
    finally:
        stopping.set()
        await loop
    assert passes == 3, "woken twice, by the two waits"
