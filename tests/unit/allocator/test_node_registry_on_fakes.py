"""The allocator's node rules (eru_allocator.nodes.registry) on the in-memory store's nodes capability
(`eru.store.nodes`), in milliseconds: a bad registration fails alone with the field named, a node registering again
stays where an operator moved it, set-node adds, changes and refuses (with the field named; nothing written), warns of
a capacity below usage, cordon of an unknown node, and a condition that frees batch room wakes the admission of its
pod's waiting requests. The contract suite (tests/integration/store/test_nodes_contract.py) proves the fake answers
as PostgreSQL does.
"""

from __future__ import annotations

import pytest

from eru.domain import NodeRegistration
from eru.domain.colocation import NodeCondition
from eru.domain.messages import CordonRequest, SetNodeRequest
from eru.errors import InvalidInput, NotFound
from eru.store.protocol import ContainerRow, PodWrites, Usage, WaitRow
from eru.testing.memory_store import InMemoryStore
from eru_allocator.nodes.registry import cordon, record_conditions, register_many, set_node

POD = "cp"


def _registration(node: str, pod: str = POD, **fields: object) -> NodeRegistration:
    return NodeRegistration.model_validate(
        {"node": node, "pod": pod, "cpu_map": {"0": 100, "1": 100}, "memory": 1 << 30, **fields}
    )


async def test_a_bad_registration_fails_alone_naming_its_field_and_nothing_is_written() -> None:
    store = InMemoryStore()
    bad = _registration("n2", cpu_map={"0": -5})
    with pytest.raises(InvalidInput) as raised:
        await register_many(store, [_registration("n1"), bad])
    assert raised.value.field == "cpu_map.0"
    assert store.nodes == {}


async def test_a_node_registering_again_stays_in_the_pod_an_operator_moved_it_to() -> None:
    store = InMemoryStore()
    await register_many(store, [_registration("n1", labels={"zone": "a"})])
    await set_node(store, SetNodeRequest(node="n1", pod="moved"))
    await register_many(store, [_registration("n1", memory=2 << 30, labels={"zone": "b"})])
    node = store.nodes["n1"]
    assert (node.pod, node.resources.memory, dict(node.labels)) == ("moved", 2 << 30, {"zone": "b"})
    assert "moved" in store.pods


async def test_set_node_adds_a_node_only_with_its_pod_cpu_map_and_memory() -> None:
    store = InMemoryStore()
    with pytest.raises(NotFound, match="needs pod, cpu_map and memory"):
        await set_node(store, SetNodeRequest(node="n1", pod=POD))
    reply = await set_node(store, SetNodeRequest(node="n1", pod=POD, cpu_map={"0": 100}, memory=1 << 30))
    assert reply.message == "node n1 added"
    assert store.nodes["n1"].pod == POD


async def test_a_capacity_below_usage_is_set_with_a_warning_and_usage_untouched() -> None:
    store = InMemoryStore()
    await register_many(store, [_registration("n1")])
    async with store.pod(POD) as session:
        await session.submit(PodWrites(usage={"n1": [Usage({"0": 80}, 512 << 20, {})]}))
    reply = await set_node(store, SetNodeRequest(node="n1", cpu_map={"0": 50, "1": 100}, memory=256 << 20))
    assert reply.warnings == [
        "core 0: capacity 50 pieces is below its usage 80",
        f"memory: capacity {256 << 20} bytes is below its usage {512 << 20}",
    ]
    assert store.nodes["n1"].resources.used_memory == 512 << 20


async def test_a_node_with_live_containers_is_not_moved_and_nothing_changes() -> None:
    store = InMemoryStore()
    await register_many(store, [_registration("n1")])
    row = ContainerRow("c1", "d1", "n1", POD, "web", "busybox", "acme", "prod", 0, "{}", "{}", "running", "{}", None)
    store.containers["c1"] = row
    with pytest.raises(InvalidInput) as raised:
        await set_node(store, SetNodeRequest(node="n1", pod="other", memory=2 << 30))
    assert raised.value.field == "pod"
    assert "still runs 1 containers in pod 'cp'" in str(raised.value)
    assert (store.nodes["n1"].pod, store.nodes["n1"].resources.memory) == (POD, 1 << 30)
    assert "other" not in store.pods


async def test_removing_an_agents_label_is_refused_naming_remove_labels() -> None:
    store = InMemoryStore()
    await register_many(store, [_registration("n1", labels={"zone": "a"})])
    await set_node(store, SetNodeRequest(node="n1", labels={"team": "web"}))
    assert dict(store.nodes["n1"].labels) == {"zone": "a", "team": "web"}
    with pytest.raises(InvalidInput, match="zone is the agent's") as raised:
        await set_node(store, SetNodeRequest(node="n1", remove_labels=["zone"]))
    assert raised.value.field == "remove_labels"
    await set_node(store, SetNodeRequest(node="n1", remove_labels=["team"]))
    assert dict(store.nodes["n1"].labels) == {"zone": "a"}


async def test_cordon_of_an_unknown_node_is_not_found() -> None:
    store = InMemoryStore()
    await register_many(store, [_registration("n1")])
    assert (await cordon(store, CordonRequest(node="n1", cordoned=True))).message == "node n1 cordoned"
    assert store.nodes["n1"].cordoned
    with pytest.raises(NotFound):
        await cordon(store, CordonRequest(node="ghost", cordoned=True))


async def test_a_condition_that_frees_batch_room_wakes_its_pods_waiting_requests_once() -> None:
    store = InMemoryStore()
    await register_many(store, [_registration("w1"), _registration("w2")])
    forbid = {"forbid_schedule_cpu": True}
    await record_conditions(store, [NodeCondition(node="w1", time=1.0, **forbid), NodeCondition(node="w2", time=1.0)])
    assert store.node_state.woken == [], "no request waits"
    store.waits.append(WaitRow("d1", "k1", POD, "acme", 30.0, "{}", "{}", "{}"))
    await record_conditions(store, [NodeCondition(node="w2", time=2.0)])
    assert store.node_state.woken == [], "nothing freed"
    await record_conditions(store, [NodeCondition(node="w1", time=2.0), NodeCondition(node="w2", time=3.0)])
    assert store.node_state.woken == [POD]
