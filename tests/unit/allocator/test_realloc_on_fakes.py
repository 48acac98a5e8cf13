"""Realloc (eru_allocator.operations.realloc) on the in-memory store's operations capability (`eru.store.operations`),
in milliseconds: a group fits whole (charged at once, state `updating`, the old allocation kept, one update command
each, the decision recorded and re-solvable by `eru plan`) or fails whole and keeps its allocation while another
group goes ahead; nothing fits: nothing changes; a tenant growing over its limit rolls everything back; unknown and
not running containers are refused naming the field. The contract suite (tests/integration/store/
test_operations_contract.py) proves the fake answers as PostgreSQL does.
"""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from eru.bus.subjects import node_command
from eru.domain import Allocation, NodeCommand
from eru.domain.messages import ReallocRequest
from eru.errors import InvalidInput, NotFound, PlanningFailure
from eru.fairness.drf import Tenant
from eru.plan_api import solve
from eru.planning import NodeResources, PlanningConfig
from eru.store.protocol import ContainerRow, DeployRow, PodWrites, Usage
from eru.testing.memory_store import InMemoryStore
from eru_allocator.operations.realloc import realloc

POD = "cp"
GiB = 1 << 30
CONFIG = PlanningConfig()
BOUND = {"cpu_bind": True, "cpu_request": 1.0, "memory_request": GiB}


async def _store(*placed: tuple[str, str, str]) -> InMemoryStore:
    """Nodes n1 and n2 (4 cores, 8 GiB each) and running containers (id, node, core), a bound core and a GiB each."""
    store = InMemoryStore()
    store.add_pod(POD)
    for name in ("n1", "n2"):
        store.add_node(POD, NodeResources(name, {str(core): 100 for core in range(4)}, 8 * GiB))
    store.add_tenant(Tenant("acme"))
    rows: list[ContainerRow] = []
    usage: dict[str, list[Usage]] = {}
    for container_id, node, core in placed:
        allocation = Allocation(cpu_map={core: 100}, memory=GiB, cpu_bind=True, cpu_limit=1.0)
        rows.append(
            ContainerRow(
                container_id,
                "d1",
                node,
                POD,
                "db",
                "pg",
                "acme",
                "prod",
                0,
                allocation.model_dump_json(),
                json.dumps(BOUND),
                "running",
                "{}",
                None,
            )
        )
        usage.setdefault(node, []).append(Usage({core: 100}, GiB, {}))
    deploy = DeployRow("d1", "key-d1", POD, "acme", "completed", "{}", "{}")
    async with store.pod(POD) as session:
        await session.submit(PodWrites(deploys=[deploy], containers=rows, usage=usage))
    store.outbox.clear()
    return store


def _used(store: InMemoryStore, node: str) -> tuple[int, int]:
    resources = store.nodes[node].resources
    return sum(resources.used_cpu_map.values()), resources.used_memory


async def test_a_group_that_fits_is_charged_whole_its_old_allocation_kept_and_its_decision_recorded() -> None:
    store = await _store(("c1", "n1", "0"), ("c2", "n1", "1"))
    before = {cid: store.containers[cid].allocation for cid in ("c1", "c2")}
    reply = await realloc(store, CONFIG, "test", ReallocRequest(container_ids=["c2", "c1"], cpu_request=1))
    assert sorted(row["id"] for row in reply.rows) == ["c1", "c2"]
    assert reply.warnings == []
    assert _used(store, "n1") == (400, 2 * GiB)
    cores = []
    for cid in ("c1", "c2"):
        row = store.containers[cid]
        assert row.state == "updating"
        cpu_map = json.loads(row.allocation)["cpu_map"]
        assert sum(cpu_map.values()) == 200
        cores.append(set(cpu_map))
        assert json.loads(row.resources)["cpu_request"] == 2.0
        previous = json.loads(store.event_state.previous_allocations[cid] or "{}")
        assert previous == {**json.loads(before[cid]), "resources": BOUND}
    assert not cores[0] & cores[1], "whole cores, never shared"
    commands = [m.message for m in store.outbox]
    assert all(isinstance(c, NodeCommand) and c.kind == "update" for c in commands)
    assert sorted(c.container_id for c in commands if isinstance(c, NodeCommand)) == ["c1", "c2"]
    assert {m.subject for m in store.outbox} == {node_command("n1", "update")}
    (decision,) = store.decisions.values()
    assert decision.kind == "realloc"
    assert solve(json.loads(decision.input)) == json.loads(decision.output), "`eru plan` re-runs it"


async def test_a_group_that_does_not_fit_keeps_its_allocation_while_another_goes_ahead() -> None:
    store = await _store(("c1", "n1", "0"), ("c2", "n1", "1"), ("c3", "n2", "0"))
    store.nodes["n1"].resources = NodeResources(
        "n1", {"0": 100, "1": 100, "2": 100}, 8 * GiB, used_cpu_map={"0": 100, "1": 100}, used_memory=2 * GiB
    )
    reply = await realloc(store, CONFIG, "test", ReallocRequest(container_ids=["c1", "c2", "c3"], cpu_request=1))
    assert [row["id"] for row in reply.rows] == ["c3"]
    (warning,) = reply.warnings
    assert warning.startswith("node n1: c1, c2 keep their allocation")
    assert [store.containers[cid].state for cid in ("c1", "c2", "c3")] == ["running", "running", "updating"]
    assert _used(store, "n1") == (200, 2 * GiB)
    assert _used(store, "n2") == (200, GiB)
    outcomes = sorted("error" in json.loads(d.output) for d in store.decisions.values())
    assert outcomes == [False, True], "both groups' decisions are recorded, the failed one with its error"
    assert [m.subject for m in store.outbox] == [node_command("n2", "update")]


async def test_when_nothing_fits_nothing_changes() -> None:
    store = await _store(("c1", "n1", "0"), ("c2", "n1", "1"))
    with pytest.raises(PlanningFailure, match="no container could be reallocated"):
        await realloc(store, CONFIG, "test", ReallocRequest(container_ids=["c1", "c2"], cpu_request=2))
    assert [store.containers[cid].state for cid in ("c1", "c2")] == ["running", "running"]
    assert _used(store, "n1") == (200, 2 * GiB)
    assert store.outbox == []
    assert store.decisions == {}, "the failure rolls back its decision with everything else"
    assert store.event_state.previous_allocations == {}


async def test_a_tenant_growing_over_its_limit_rolls_the_whole_realloc_back() -> None:
    store = await _store(("c1", "n1", "0"), ("c2", "n2", "0"))
    store.add_tenant(Tenant("acme", limit={"cpu": Fraction(3)}))
    with pytest.raises(PlanningFailure) as refused:
        await realloc(store, CONFIG, "test", ReallocRequest(container_ids=["c1", "c2"], cpu_request=1))
    assert refused.value.code == "tenant_limit"
    assert "tenant 'acme' would exceed its limit in pod 'cp' (cpu: has 2, needs 2 more, limit 3)" in str(refused.value)
    assert [store.containers[cid].state for cid in ("c1", "c2")] == ["running", "running"]
    assert (_used(store, "n1"), _used(store, "n2")) == ((100, GiB), (100, GiB))
    assert (store.outbox, store.decisions) == ([], {})


async def test_a_tenant_over_a_lowered_limit_may_still_shrink() -> None:
    store = await _store(("c1", "n1", "0"), ("c2", "n1", "1"))
    store.add_tenant(Tenant("acme", limit={"cpu": Fraction(1)}))
    reply = await realloc(store, CONFIG, "test", ReallocRequest(container_ids=["c1"], memory_request=-(GiB // 2)))
    assert [row["id"] for row in reply.rows] == ["c1"]
    assert _used(store, "n1") == (200, GiB + GiB // 2)


async def test_unknown_and_not_running_containers_are_refused_naming_the_field() -> None:
    store = await _store(("c1", "n1", "0"), ("c2", "n1", "1"))
    with pytest.raises(NotFound) as unknown:
        await realloc(store, CONFIG, "test", ReallocRequest(container_ids=["c1", "nope"], cpu_request=1))
    assert unknown.value.field == "container_ids[1]"
    store.containers["c2"] = store.containers["c2"]._replace(state="stopped")
    with pytest.raises(InvalidInput) as stopped:
        await realloc(store, CONFIG, "test", ReallocRequest(container_ids=["c1", "c2"], cpu_request=1))
    assert stopped.value.field == "container_ids"
    assert "container c2 is stopped; only running ones" in stopped.value.message
    assert store.containers["c1"].state == "running"
    assert (_used(store, "n1"), store.outbox) == ((200, 2 * GiB), [])
