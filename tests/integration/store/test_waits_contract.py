"""The waits capability's contract (`eru.store.waits`, docs/store.md "The contract suite"), run against the in-memory
store (`eru.testing.memory_store`) and against PostgreSQL (`PgStore`'s sessions, `PgAdmissionQueue`), like httpx's
transports: what the admission pass's unit tests learn on the fake holds on the database.

The cases speak only the verbs: a deploy batch's `submit` queues waits; a pod session reads them (`pod_waits`: arrival
order, the pod's only, expired or not), ends them (`fail_wait`, `admit_wait`: the deploy's status and result, the
queue row gone), notes why they wait (`set_wait_reason`) and reads the tenants; a session that raises changes none of
it; the queue says which pods have waits and how far the next deadline is, and `listen_admission` calls back when a
wait is submitted. A deploy is read back with `find_deploys`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import pytest
import pytest_asyncio

from eru.fairness import Tenant
from eru.store.pool import create_pool
from eru.store.protocol import AllocatorStore, DeployRow, PodWrites, WaitRow
from eru.store.tenants import TenantStore
from eru.store.waits import AdmissionQueue, PendingWait
from eru.testing.memory_store import InMemoryStore
from eru_allocator.store.postgres import PgStore
from eru_allocator.store.waiting import PgAdmissionQueue

POD = "cp"
OTHER = "other"


@dataclass
class Backend:
    """A store under contract: its deploy path, its tenants and its admission queue."""

    name: str
    store: AllocatorStore
    tenants: TenantStore
    queue: AdmissionQueue


@pytest_asyncio.fixture
async def backend(database: str | None) -> AsyncIterator[Backend]:
    """The in-memory store, then PostgreSQL on the test's database."""
    if database is None:
        store = InMemoryStore()
        yield Backend("memory", store, store, store)
        return
    pool = await create_pool(database, min_size=1, max_size=4)
    try:
        pg = PgStore(pool)
        yield Backend("postgres", pg, pg, PgAdmissionQueue(pool))
        await pg.wait_unlocked()  # deploy batches let their locks go before the pool closes
    finally:
        await pool.close()


def _waiting(key: str, *, pod: str = POD, tenant: str = "acme", wait: float = 60.0) -> tuple[DeployRow, WaitRow]:
    """A waiting deploy and its queue row."""
    request = json.dumps({"request_id": key, "wait_seconds": wait})
    deploy = DeployRow(f"d-{key}", key, pod, tenant, "waiting", request, json.dumps({"queued": key}))
    row = WaitRow(deploy.id, key, pod, tenant, wait, request, json.dumps({"id": f"m-{key}"}), '{"code": "quota"}')
    return deploy, row


async def _queue(backend: Backend, *waits: tuple[DeployRow, WaitRow], pod: str = POD) -> None:
    """Submit `waits` in one batch of `pod`."""
    async with backend.store.deploy_batch(pod) as session:
        await session.submit(PodWrites(deploys=[d for d, _ in waits], waits=[w for _, w in waits]))


async def _waits(backend: Backend, pod: str = POD) -> list[PendingWait]:
    async with backend.store.pod(pod) as session:
        return await session.pod_waits()


async def _deploy(backend: Backend, key: str) -> tuple[str, dict[str, Any]]:
    """A deploy's status and result, read back."""
    async with backend.store.pod(POD) as session:
        found = (await session.find_deploys([key]))[key]
    result = json.loads(found.result) if isinstance(found.result, str) else found.result
    return found.status, result


def _json(text: str) -> Any:
    return json.loads(text)


async def test_waits_are_read_in_arrival_order_in_their_pod_only(backend: Backend) -> None:
    assert await _waits(backend) == []
    assert await backend.queue.waiting_pods() == []
    assert await backend.queue.next_deadline() is None
    await _queue(backend, _waiting("k2"))
    await _queue(backend, _waiting("k3", tenant="acme/web", wait=30.0), _waiting("k1"))
    await _queue(backend, _waiting("o1", pod=OTHER), pod=OTHER)

    waits = await _waits(backend)
    assert [w.request_key for w in waits] == ["k2", "k3", "k1"], "arrival order, not key order"
    assert waits[0].arrival < waits[1].arrival < waits[2].arrival
    first = waits[1]
    assert (first.deploy_id, first.tenant, first.expired) == ("d-k3", "acme/web", False)
    assert _json(first.request) == {"request_id": "k3", "wait_seconds": 30.0}
    assert _json(first.envelope) == {"id": "m-k3"}
    assert _json(first.reason) == {"code": "quota"}
    assert [w.request_key for w in await _waits(backend, OTHER)] == ["o1"]
    assert await backend.queue.waiting_pods() == [POD, OTHER]
    left = await backend.queue.next_deadline()
    assert left is not None
    assert 0 < left <= 30.0, "the earliest deadline: the 30-second wait's"


async def test_a_wait_past_its_deadline_reads_expired(backend: Backend) -> None:
    await _queue(backend, _waiting("k1", wait=0.0), _waiting("k2"))
    waits = await _waits(backend)
    assert [(w.request_key, w.expired) for w in waits] == [("k1", True), ("k2", False)]
    left = await backend.queue.next_deadline()
    assert left is not None
    assert left <= 0, "a deadline passed: negative or zero"


async def test_a_failed_wait_merges_its_result_and_leaves_the_queue(backend: Backend) -> None:
    await _queue(backend, _waiting("k1"), _waiting("k2"))
    error = {"error": {"code": "wait_expired", "message": "not admitted"}}
    async with backend.store.pod(POD) as session:
        await session.fail_wait("d-k1", json.dumps(error))
        assert [w.request_key for w in await session.pod_waits()] == ["k2"], "the session reads its own change"
    assert await _deploy(backend, "k1") == ("failed", {"queued": "k1", **error}), "merged into the old result"
    assert [w.request_key for w in await _waits(backend)] == ["k2"]
    assert await _deploy(backend, "k2") == ("waiting", {"queued": "k2"})


async def test_an_admitted_wait_takes_the_placement_and_leaves_the_queue(backend: Backend) -> None:
    await _queue(backend, _waiting("k1"))
    async with backend.store.pod(POD) as session:
        await session.admit_wait("d-k1", "planned", json.dumps({"placements": {"n1": 2}}))
    assert await _deploy(backend, "k1") == ("planned", {"placements": {"n1": 2}}), "replaced, not merged"
    assert await _waits(backend) == []
    assert await backend.queue.waiting_pods() == []
    assert await backend.queue.next_deadline() is None
    async with backend.store.pod(POD) as session:
        assert not await session.has_waiting()


async def test_the_reason_a_request_waits_is_kept(backend: Backend) -> None:
    await _queue(backend, _waiting("k1"), _waiting("k2"))
    reason = {"code": "over_limit", "message": "acme is at its limit", "details": {"cpu": 4}}
    async with backend.store.pod(POD) as session:
        await session.set_wait_reason("d-k2", json.dumps(reason))
        await session.set_wait_reason("d-unknown", json.dumps(reason))  # no such wait: nothing changes
        assert [_json(w.reason) for w in await session.pod_waits()] == [{"code": "quota"}, reason]
    assert [_json(w.reason) for w in await _waits(backend)] == [{"code": "quota"}, reason]


async def test_a_session_that_raises_leaves_the_waits_as_they_were(backend: Backend) -> None:
    await _queue(backend, _waiting("k1"), _waiting("k2"), _waiting("k3"))

    async def failing_pass() -> None:
        async with backend.store.pod(POD) as session:
            await session.fail_wait("d-k1", '{"error": {"code": "tenant_limit"}}')
            await session.admit_wait("d-k2", "planned", "{}")
            await session.set_wait_reason("d-k3", '{"code": "later"}')
            raise RuntimeError("the pass failed")

    with pytest.raises(RuntimeError, match="the pass failed"):
        await failing_pass()
    waits = await _waits(backend)
    assert [(w.request_key, _json(w.reason)) for w in waits] == [(k, {"code": "quota"}) for k in ("k1", "k2", "k3")]
    assert await _deploy(backend, "k1") == ("waiting", {"queued": "k1"})
    assert await _deploy(backend, "k2") == ("waiting", {"queued": "k2"})


async def test_the_session_reads_the_tenants_as_configured(backend: Backend) -> None:
    assert await backend.tenants.create_tenant(Tenant("acme", Fraction(5, 2), {"cpu": Fraction(3)})) == "created"
    assert await backend.tenants.create_tenant(Tenant("acme/web")) == "created"
    async with backend.store.pod(POD) as session:
        tenants = await session.tenants()
    assert sorted(tenants) == ["acme", "acme/web", "default"]
    assert tenants["acme"] == Tenant("acme", Fraction(5, 2), {"cpu": Fraction(3)})


async def test_a_submitted_wait_wakes_the_listeners_with_its_pod(backend: Backend) -> None:
    woken: list[str] = []
    arrived = asyncio.Event()

    def wake(pod: str) -> None:
        woken.append(pod)
        arrived.set()

    async with backend.queue.listen_admission(wake):
        await _queue(backend, _waiting("o1", pod=OTHER), pod=OTHER)
        await asyncio.wait_for(arrived.wait(), 10)
    assert woken == [OTHER]
