"""Remove and replace (eru_allocator.operations.containers) and the lifecycle verbs
(eru_allocator.operations.workloads.ops) on the in-memory store's operations capability (`eru.store.operations`), in
milliseconds: remove asks each node agent to remove its containers (state `stopping`,
the gone ones warned of and left as they are; an unknown id refuses the whole request, naming it); replace plans a
new container on the old one's node with its allocation and no new charge, running the deploy's workload with the
changes asked, refuses a second replacement while one is pending, a container not running, and a workload the pod's
policy forbids (naming the field), writing nothing; a lifecycle verb queues its node commands (the ledger moves when
the agents confirm), refuses the whole request for one container that cannot take it, and lets a tenant act only on
its own workload; a reservation fits its node beside the others' or changes nothing, is listed with what the
tenant's containers use of it, and is dropped once. The contract suite (tests/integration/store/
test_operations_contract.py) proves the fake answers as PostgreSQL does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from eru.bus.subjects import node_command
from eru.domain import Allocation, NodeCommand
from eru.domain.messages import LifecycleRequest, RemoveRequest, ReplaceRequest
from eru.domain.tenants import TenantReservationsRequest, TenantReserveRequest, TenantUnreserveRequest
from eru.errors import InvalidInput, NotFound, PermissionDenied
from eru.fairness.drf import Tenant
from eru.planning import NodeResources, PlanningConfig
from eru.planning.reservations import Amount
from eru.store.operations import OperationStore
from eru.store.protocol import ContainerRow, DeployRow, PodWrites, Usage
from eru.testing.memory_store import InMemoryStore
from eru_allocator.operations.containers import remove, replace
from eru_allocator.operations.reservations import list_reservations, reserve, unreserve
from eru_allocator.operations.workloads.ops import act, remove_workload

POD = "cp"
GiB = 1 << 30
REQUEST = {
    "pod": POD,
    "workload": {"name": "web", "image": "web:1", "tenant": "acme", "command": ["serve"], "env": {"A": "1"}},
}


@dataclass(frozen=True)
class OnFake:
    """What remove and replace need (`containers.OnStore`), on the fake."""

    source: str
    operations: OperationStore


async def _store(*placed: tuple[str, str, str]) -> tuple[InMemoryStore, OnFake]:
    """Nodes n1 and n2, and containers (id, node, state) of deploy d1, a core and a GiB each."""
    store = InMemoryStore()
    store.add_pod(POD)
    for name in ("n1", "n2"):
        store.add_node(POD, NodeResources(name, {"0": 100, "1": 100}, 4 * GiB))
    rows: list[ContainerRow] = []
    usage: dict[str, list[Usage]] = {}
    for container_id, node, state in placed:
        allocation = Allocation(cpu_map={"0": 100}, memory=GiB, cpu_bind=True, cpu_limit=1.0)
        rows.append(
            ContainerRow(
                container_id,
                "d1",
                node,
                POD,
                "web",
                "web:1",
                "acme",
                "prod",
                0,
                allocation.model_dump_json(),
                json.dumps({"cpu_bind": True, "cpu_request": 1.0, "memory_request": GiB}),
                state,
                '{"app": "web"}',
                None,
            )
        )
        usage.setdefault(node, []).append(Usage({"0": 100}, GiB, {}))
    deploy = DeployRow("d1", "key-d1", POD, "acme", "completed", json.dumps(REQUEST), "{}")
    async with store.pod(POD) as session:
        await session.submit(PodWrites(deploys=[deploy], containers=rows, usage=usage))
    store.outbox.clear()
    return store, OnFake("test", store)


def _commands(store: InMemoryStore) -> list[NodeCommand]:
    return [m.message for m in store.outbox if isinstance(m.message, NodeCommand)]


async def test_remove_asks_each_node_agent_and_warns_of_the_gone_ones() -> None:
    store, ctx = await _store(("c1", "n1", "running"), ("c2", "n2", "stopped"), ("c3", "n1", "removed"))
    reply = await remove(ctx, RemoveRequest(container_ids=["c2", "c1", "c3", "c1"], reason="done"))
    assert reply.message == "removing 2 container(s)"
    assert reply.rows == [{"id": "c1", "node": "n1"}, {"id": "c2", "node": "n2"}]
    assert reply.warnings == ["container c3 is already removed"]
    assert [store.containers[cid].state for cid in ("c1", "c2", "c3")] == ["stopping", "stopping", "removed"]
    assert [m.subject for m in store.outbox] == [node_command("n1", "remove"), node_command("n2", "remove")]
    assert [(c.kind, c.container_id, c.reason) for c in _commands(store)] == [
        ("remove", "c1", "done"),
        ("remove", "c2", "done"),
    ]
    assert store.nodes["n1"].resources.used_memory == 2 * GiB, "resources come back when the agents confirm"


async def test_an_unknown_container_refuses_the_whole_remove() -> None:
    store, ctx = await _store(("c1", "n1", "running"))
    with pytest.raises(NotFound) as unknown:
        await remove(ctx, RemoveRequest(container_ids=["c1", "nope"]))
    assert unknown.value.field == "container_ids[1]"
    assert store.containers["c1"].state == "running"
    assert store.outbox == []


async def test_replace_plans_a_new_container_with_the_old_allocation_and_no_new_charge() -> None:
    store, ctx = await _store(("c1", "n1", "running"))
    used = store.nodes["n1"].resources
    reply = await replace(ctx, ReplaceRequest(container_id="c1", image="web:2", env={"B": "2"}))
    (row,) = reply.rows
    new = store.containers[row["new"]]
    assert (row["old"], row["node"]) == ("c1", "n1")
    assert (new.state, new.replaces, new.node, new.deploy_id, new.image) == ("planned", "c1", "n1", "d1", "web:2")
    assert new.allocation == store.containers["c1"].allocation
    assert store.containers["c1"].state == "running"
    assert store.nodes["n1"].resources == used
    ((subject, command, _),) = store.outbox
    assert subject == node_command("n1", "replace")
    assert isinstance(command, NodeCommand)
    assert (command.kind, command.container_id) == ("replace", "c1")
    assert command.replacement is not None
    spec = command.replacement
    assert (spec.container_id, spec.deploy_id) == (new.id, "d1")
    assert (spec.workload.image, spec.workload.command, spec.workload.env) == ("web:2", ["serve"], {"B": "2"})
    assert spec.allocation == Allocation.model_validate_json(store.containers["c1"].allocation)


async def test_a_second_replacement_waits_for_the_first() -> None:
    store, ctx = await _store(("c1", "n1", "running"))
    first = await replace(ctx, ReplaceRequest(container_id="c1", image="web:2"))
    with pytest.raises(InvalidInput) as pending:
        await replace(ctx, ReplaceRequest(container_id="c1", image="web:3"))
    assert pending.value.field == "container_id"
    assert f"already being replaced by {first.rows[0]['new']}" in pending.value.message
    assert len(store.outbox) == 1


async def test_replace_refuses_what_is_not_running_or_the_pod_forbids_and_writes_nothing() -> None:
    store, ctx = await _store(("c1", "n1", "running"), ("c2", "n1", "stopped"))
    with pytest.raises(InvalidInput, match="container c2 is stopped; only a running one can be replaced"):
        await replace(ctx, ReplaceRequest(container_id="c2", image="web:2"))
    store.add_pod(POD, {"image_allow_list": ["web:*"]})
    with pytest.raises(InvalidInput) as forbidden:
        await replace(ctx, ReplaceRequest(container_id="c1", image="other:1"))
    assert forbidden.value.field == "workload.image"
    with pytest.raises(NotFound) as unknown:
        await replace(ctx, ReplaceRequest(container_id="nope"))
    assert unknown.value.field == "container_ids[0]"
    assert sorted(store.containers) == ["c1", "c2"]
    assert store.outbox == []


async def test_a_lifecycle_verb_queues_its_commands_and_leaves_the_ledger_to_the_agents() -> None:
    store, _ = await _store(("c1", "n1", "running"), ("c2", "n2", "stopped"), ("c3", "n1", "removed"))
    reply = await act(store, "test", "stop", LifecycleRequest(workload="web"))
    assert reply.message == "stopping 1 container(s) of workload web"
    assert reply.rows == [{"id": "c1", "node": "n1", "workload": "web", "from": "running", "to": "stopped"}]
    assert reply.warnings == ["container c2 is already stopped"]
    assert [(c.kind, c.container_id) for c in _commands(store)] == [("stop", "c1")]
    assert store.containers["c1"].state == "running", "the ledger moves when the agent confirms"


async def test_a_refused_container_refuses_the_whole_lifecycle_request() -> None:
    store, _ = await _store(("c1", "n1", "stopped"), ("c2", "n2", "updating"))
    with pytest.raises(InvalidInput) as refused:
        await act(store, "test", "restart", LifecycleRequest(container_ids=["c1", "c2"]))
    assert refused.value.field == "container_ids[1]"
    with pytest.raises(NotFound) as unknown:
        await act(store, "test", "start", LifecycleRequest(container_ids=["c1", "nope"]))
    assert unknown.value.field == "container_ids[1]"
    assert store.outbox == []


async def test_a_tenant_acts_only_on_its_own_workload() -> None:
    store, ctx = await _store(("c1", "n1", "running"))
    with pytest.raises(PermissionDenied):
        await act(store, "test", "stop", LifecycleRequest(workload="web"), tenant="other")
    with pytest.raises(NotFound, match="unknown workload 'db'"):
        await act(store, "test", "stop", LifecycleRequest(workload="db"))
    reply = await remove_workload(ctx, LifecycleRequest(workload="web"), tenant="acme")
    assert reply.message == "removing 1 container(s) of workload web"
    assert store.containers["c1"].state == "stopping"


async def test_a_reservation_fits_its_node_beside_the_others_or_changes_nothing() -> None:
    store, _ = await _store(("c1", "n1", "running"))
    store.add_tenant(Tenant("acme"))
    store.add_tenant(Tenant("zeta"))
    reply = await reserve(store, TenantReserveRequest(tenant="acme", node="n1", cpu=1.5, memory="1GiB"))
    assert reply.rows == [{"tenant": "acme", "node": "n1", "pod": POD, "cpu": 1.5, "memory": GiB}]
    assert store.node_state.woken == [POD], "the pod's waiting requests are woken"
    with pytest.raises(InvalidInput) as over:
        await reserve(store, TenantReserveRequest(tenant="zeta", node="n1", cpu=1, memory="1GiB"))
    assert over.value.field == "cpu"
    assert "1.5 reserved by others: 1 more do not fit" in over.value.message
    with pytest.raises(InvalidInput) as group:
        await reserve(store, TenantReserveRequest(tenant="acme/batch", node="n1", cpu=0.5, memory="0"))
    assert group.value.field == "tenant"
    with pytest.raises(NotFound) as unknown:
        await reserve(store, TenantReserveRequest(tenant="nope", node="n1", cpu=0.5, memory="0"))
    assert unknown.value.field == "tenant"
    assert store.reservations == {"n1": {"acme": Amount(150, GiB)}}
    assert store.node_state.woken == [POD]


async def test_reservations_are_listed_with_their_use_and_dropped_once() -> None:
    store, _ = await _store(("c1", "n1", "running"), ("c2", "n2", "running"))
    store.add_tenant(Tenant("acme"))
    await reserve(store, TenantReserveRequest(tenant="acme", node="n1", cpu=2, memory="512MiB"))
    listed = await list_reservations(store, TenantReservationsRequest(tenant="acme"), PlanningConfig())
    assert listed.rows == [
        {
            "tenant": "acme",
            "node": "n1",
            "pod": POD,
            "cpu": 2.0,
            "memory": GiB // 2,
            "used_cpu": 1.0,
            "used_memory": GiB // 2,
        }
    ]
    await unreserve(store, TenantUnreserveRequest(tenant="acme", node="n1"))
    with pytest.raises(NotFound, match="tenant 'acme' has no reservation on node 'n1'"):
        await unreserve(store, TenantUnreserveRequest(tenant="acme", node="n1"))
    assert store.reservations == {}
