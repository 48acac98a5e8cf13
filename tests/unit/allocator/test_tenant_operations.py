"""The tenant operations (`tenant-create`, `tenant-set`, `tenant-rm`: eru_allocator/operations/tenants.py) on the
in-memory store's tenants capability (`eru.store.tenants.TenantStore`, docs/store.md "Capabilities beyond the deploy
path"): the same answers and refusals as through the real pipeline (tests/integration/pipeline/test_tenants.py,
`test_tenant_operations_and_bad_input`), in milliseconds. The contract suite holds the fake to PostgreSQL's answers.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from eru.domain.tenants import TenantCreateRequest, TenantListRequest, TenantRemoveRequest, TenantSetRequest
from eru.errors import EruError, InvalidInput, NotFound
from eru.fairness import Tenant
from eru.planning import NodeResources, PlanningConfig
from eru.planning.reservations import Amount
from eru.store.protocol import ContainerRow, WaitRow
from eru.testing.memory_store import InMemoryStore
from eru_allocator.operations.tenants import create_tenant, list_tenants, remove_tenant, set_tenant

GIB = 1 << 30


def _container(cid: str, tenant: str, state: str = "running") -> ContainerRow:
    return ContainerRow(cid, "d1", "n1", "p1", "w", "busybox", tenant, "prod", 0, "{}", "{}", state, "{}", None)


async def _run(store: InMemoryStore, request: TenantCreateRequest | TenantSetRequest) -> None:
    if isinstance(request, TenantCreateRequest):
        await create_tenant(store, request)
    else:
        await set_tenant(store, request)


async def test_create_and_set_answer_as_the_pipeline_does_and_a_refusal_changes_nothing() -> None:
    store = InMemoryStore()
    reply = await create_tenant(
        store, TenantCreateRequest(name="A", weight=2, quota={"cpu": 1}, limit={"cpu": 3, "memory": "4GiB"})
    )
    assert reply.message == "tenant A created"
    assert reply.rows == [{"name": "A", "weight": 2, "quota": {"cpu": 1}, "limit": {"cpu": 3, "memory": 4 * GIB}}]
    bad: list[tuple[TenantCreateRequest | TenantSetRequest, str]] = [
        (TenantCreateRequest(name="A"), "name: tenant 'A' exists"),
        (TenantCreateRequest(name="B/batch"), "name: group of unknown tenant 'B'"),
        (TenantCreateRequest(name="B", weight=0), "weight: must be > 0"),
        (TenantCreateRequest(name="B", quota={"cpu": -1}), "quota.cpu: must be ≥ 0"),
        (TenantCreateRequest(name="B", limit={"memory": "lots"}), "limit.memory: cannot read"),
        (TenantSetRequest(name="nobody", weight=3), "name: unknown tenant 'nobody'"),
        (TenantSetRequest(name="A", weight=5, limit={"cpu": "x"}), "limit.cpu: expected a number"),
    ]
    for request, message in bad:
        with pytest.raises(EruError, match=message) as caught:
            await _run(store, request)
        assert caught.value.code == ("not_found" if "unknown tenant 'nobody'" in message else "invalid_input")
    assert sorted(store.tenants) == ["A", "default"]
    assert store.tenants["A"].weight == 2  # the refused set changed nothing
    assert store.admission_wakes == 0

    await set_tenant(store, TenantSetRequest(name="A", weight="0.5", limit={}))
    assert store.tenants["A"] == Tenant("A", Fraction(1, 2), {"cpu": Fraction(1)}, {})
    assert store.admission_wakes == 1  # a changed setting may let a waiting request in
    assert (await create_tenant(store, TenantCreateRequest(name="A/batch"))).message == "group A/batch created"


async def test_remove_is_refused_while_the_tenant_holds_anything_and_names_it() -> None:
    store = InMemoryStore()
    for name in ("acme", "acme/batch", "zeta"):
        store.add_tenant(Tenant(name))
    store.containers["c1"] = _container("c1", "acme")
    store.containers["c2"] = _container("c2", "acme", state="removed")
    store.waits.append(WaitRow("d2", "k2", "p1", "acme", 60.0, "{}", "{}", "{}"))
    store.reservations["n1"] = {"zeta": Amount(100, GIB)}

    with pytest.raises(InvalidInput, match="the 'default' tenant always exists"):
        await remove_tenant(store, TenantRemoveRequest(name="default"))
    with pytest.raises(InvalidInput, match=r"tenant 'acme' still holds 1 live container\(s\) and 1 waiting") as caught:
        await remove_tenant(store, TenantRemoveRequest(name="acme"))
    assert (caught.value.field, caught.value.details) == ("name", {"field": "name", "containers": 1, "waiting": 1})
    store.containers.clear()
    store.waits.clear()
    with pytest.raises(InvalidInput, match=r"tenant 'acme' has groups \(acme/batch\)"):
        await remove_tenant(store, TenantRemoveRequest(name="acme"))
    with pytest.raises(InvalidInput, match=r"tenant 'zeta' reserves resources on n1"):
        await remove_tenant(store, TenantRemoveRequest(name="zeta"))
    assert sorted(store.tenants) == ["acme", "acme/batch", "default", "zeta"]  # every refusal kept them

    assert (await remove_tenant(store, TenantRemoveRequest(name="acme/batch"))).message == "tenant acme/batch removed"
    assert (await remove_tenant(store, TenantRemoveRequest(name="acme"))).message == "tenant acme removed"
    with pytest.raises(NotFound, match=r"unknown tenant 'acme' \(known: default, zeta\)"):
        await remove_tenant(store, TenantRemoveRequest(name="acme"))


async def test_the_tenant_list_reads_the_tenants_capability_only() -> None:
    store = InMemoryStore()
    store.add_pod("p1")
    store.add_node("p1", NodeResources("n1", {"0": 100, "1": 100}, 4 * GIB))
    store.add_node("p1", NodeResources("n2", {"0": 100, "1": 100}, 4 * GIB), cordoned=True)  # not capacity
    store.add_tenant(Tenant("acme", quota={"cpu": Fraction(1)}))
    store.add_tenant(Tenant("acme/batch"))
    bound = '{"cpu_bind": true, "cpu_request": 1.0, "memory_request": 1073741824}'
    store.containers["c1"] = _container("c1", "acme/batch")._replace(resources=bound)
    store.reservations["n1"] = {"acme": Amount(50, GIB)}
    store.waits.append(WaitRow("d2", "k2", "p1", "acme", 0.0, "{}", "{}", "{}"))
    config = PlanningConfig()
    reply = await list_tenants(store, TenantListRequest(pod="p1"), config, 30.0)
    assert reply.message.startswith("p1: 2 cores, 4.0GiB")
    rows = {row["name"]: row for row in reply.rows}
    assert [row["name"] for row in reply.rows] == ["acme", "acme/batch", "default"]
    assert rows["acme"]["allocated"] == {"cpu": 1, "memory": GIB}  # its group's container rolled up
    assert (rows["acme"]["waiting"], rows["acme/batch"]["level"]) == (1, 2)
    assert rows["acme"]["reserved"] == {"cpu": 0.5, "memory": GIB}
    every = await list_tenants(store, TenantListRequest(), config, 30.0)
    assert every.message.startswith("all pods: 2 cores")
    assert "reserved" not in every.rows[0]
