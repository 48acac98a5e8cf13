"""The allocator's deploy path with the in-memory store and bus (eru.testing): batches planned against the snapshot,
submitted at once, and the recorded decisions of a real run (tests/fixtures/decisions.json) reproduced exactly —
the same plans as `eru plan`, the plan API and `eru sim` give for them (tests/unit/planning/test_decide.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eru.bus import new_envelope
from eru.decision_answer import full_answer, is_compact
from eru.domain import Accepted, DeployRequest
from eru.errors import EruError, InvalidInput, PlanningFailure
from eru.planning import NodeResources, PlanningConfig, node_from_mapping
from eru.planning.decision_record import BASE_KEY
from eru.store.protocol import ContainerRow
from eru.testing.memory_bus import InMemoryBus, serve_placement
from eru.testing.memory_store import InMemoryStore
from eru_allocator.deploy.context import Context
from eru_allocator.deploy.pipeline import commit_batch
from eru_allocator.deploy.requests import validate

RECORDED: list[dict[str, Any]] = json.loads((Path(__file__).parents[2] / "fixtures" / "decisions.json").read_text())
CONFIG = PlanningConfig()
GIB = 1 << 30


def _context(store: InMemoryStore, bus: InMemoryBus | None = None) -> Context:
    if bus is None:
        bus = InMemoryBus()
        serve_placement(bus)
    return Context(store, bus, CONFIG, "allocator/test", 1.0, 30.0)


def _item(**fields: Any) -> tuple[DeployRequest, Any, Any]:
    req = DeployRequest.model_validate({"pod": "p1", **fields})
    return req, validate(req, CONFIG), new_envelope("eru.deploy.request", "test")


def _placeholder(index: int, node: str) -> ContainerRow:
    return ContainerRow(f"old-{node}-{index}", "old", node, "p1", "w", "busybox", "default", "prod", 0, "{}", "{}",
                        "running", "{}", None)  # fmt: skip


@pytest.mark.parametrize("recorded", RECORDED, ids=[f"{r['input']['mode']}-{r['input']['count']}" for r in RECORDED])
async def test_the_allocator_makes_the_recorded_decision_from_its_recorded_input(recorded: dict[str, Any]) -> None:
    problem, output = recorded["input"], recorded["output"]
    store = InMemoryStore()
    store.add_pod("p1")
    for index, raw in enumerate(problem["nodes"]):
        node = node_from_mapping({k: v for k, v in raw.items() if k != "count"}, f"nodes[{index}]")
        store.add_node("p1", node)
        for number in range(raw.get("count", 0)):  # the live instances of the workload the record counted
            store.containers[f"{node.name}-{number}"] = _placeholder(number, node.name)
    fields = {"mode": problem["mode"], "count": problem["count"], "nodes_limit": problem["nodes_limit"]}
    item = _item(workload={"name": "w", "image": "busybox", "resources": problem["request"]},
                 options=problem.get("options", {}), **fields)  # fmt: skip
    (answer,) = await commit_batch(_context(store), "p1", [item])
    (decision,) = store.decisions.values()
    # a plan is recorded with the capacity of the nodes placed on only; read back, it is the full answer
    # (docs/replay.md "A decision's answer, the nodes placed on")
    stored = json.loads(decision.output)
    assert is_compact(stored) is (len(output.get("capacity", {})) > len(output.get("deploy", {})))
    assert set(stored.get("capacity", {})) == set(stored.get("deploy", {}))
    assert full_answer(store.decision_input(decision.id), stored) == output
    # the allocator records the same problem from the same state (its nodes named, or all of the snapshot's in name
    # order by `snapshot_all`: stored once per batch), and its pod (named in a refusal, docs/planning.md "Nodes left
    # out")
    assert store.decision_input(decision.id) == {**problem, "pod": "p1"}
    compact, names = json.loads(decision.input), [node["name"] for node in problem["nodes"]]
    if compact.get("snapshot_all"):
        assert compact["nodes"] == []
        assert names == sorted(names)
    else:
        assert compact["nodes"] == names
    assert isinstance(answer, PlanningFailure if "error" in output else Accepted)


async def test_a_batch_is_planned_in_order_against_the_charged_snapshot_and_submitted_once() -> None:
    store = InMemoryStore()
    store.add_pod("p1")
    for name in ("n1", "n2"):
        store.add_node("p1", NodeResources(name, {str(core): 100 for core in range(2)}, 8 * GIB))
    web = {"name": "web", "image": "busybox", "resources": {"cpu_bind": True, "cpu_request": 1}}
    items = [_item(workload=web, count=1, request_id=f"r{i}") for i in range(5)]
    answers = await commit_batch(_context(store), "p1", items)
    assert [type(answer) for answer in answers] == [Accepted] * 4 + [PlanningFailure]  # 4 cores, 5 requests
    assert store.submits == 1
    used = {name: sum(node.resources.used_cpu_map.values()) for name, node in store.nodes.items()}
    assert used == {"n1": 200, "n2": 200}
    assert sorted(row.node for row in store.containers.values()) == ["n1", "n1", "n2", "n2"]
    subjects = sorted(message.subject.split(".")[-1] for message in store.outbox)
    # one command message per node for the whole batch: two deploys' creates in each (docs/pipeline.md)
    assert subjects.count("batch") == 2
    assert subjects.count("create") == 0
    batches = [message.message for message in store.outbox if message.subject.endswith(".batch")]
    assert sorted(len({c.spec.deploy_id for c in b.commands if c.spec}) for b in batches) == [2, 2]  # type: ignore[attr-defined]
    assert subjects.count("failed") == 1
    again = await commit_batch(_context(store), "p1", items[:2])  # a redelivery: the deploys it made, nothing new
    assert [a.deploy_id for a in again if isinstance(a, Accepted)] == [a.deploy_id for a in answers[:2]]  # type: ignore[union-attr]
    assert len(store.containers) == 4


async def test_bad_input_fails_alone_and_leaves_nothing_behind() -> None:
    store = InMemoryStore()
    store.add_pod("p1")
    store.add_node("p1", NodeResources("n1", {"0": 100, "1": 100}, 8 * GIB))
    good = {"name": "web", "image": "busybox", "resources": {"cpu_bind": True, "cpu_request": 1}}
    bad = {**good, "privileged": True}
    answers = await commit_batch(_context(store), "p1", [_item(workload=bad), _item(workload=good)])
    assert isinstance(answers[0], InvalidInput)
    assert answers[0].details["field"].startswith("workload")
    assert isinstance(answers[1], Accepted)
    assert len(store.containers) == 1
    unknown = await commit_batch(_context(store), "nope", [_item(workload=good)])
    assert isinstance(unknown[0], EruError)
    assert "unknown pod 'nope' (known: p1)" in unknown[0].message


async def test_no_distributor_means_nothing_is_committed() -> None:
    from eru.bus import Retryable

    store = InMemoryStore()
    store.add_pod("p1")
    store.add_node("p1", NodeResources("n1", {"0": 100}, 8 * GIB))
    web = {"name": "web", "image": "busybox", "resources": {"cpu_bind": True, "cpu_request": 1}}
    with pytest.raises(Retryable):
        await commit_batch(_context(store, InMemoryBus()), "p1", [_item(workload=web)])
    assert not store.containers
    assert not store.decisions
    assert store.submits == 0


async def test_score_requests_of_one_batch_see_the_qos_mix_the_earlier_ones_left() -> None:
    store = InMemoryStore()
    store.add_pod("p1", {"scorers": {"qos-balance": 1.0}})
    for name in ("n1", "n2"):
        store.add_node("p1", NodeResources(name, {str(core): 100 for core in range(4)}, 8 * GIB))
    api = {"name": "api", "image": "busybox", "resources": {"cpu_request": 0.5, "memory_request": "1GiB"}}
    answers = await commit_batch(_context(store), "p1", [_item(workload=api, mode="score", count=1) for _ in range(2)])
    assert all(isinstance(answer, Accepted) for answer in answers)
    first, second = (json.loads(row.input)["options"]["nodes"] for row in store.decisions.values())
    assert not any(load["qos"] for load in first.values())
    (placed,) = {row.node for row in store.containers.values() if row.deploy_id == answers[0].deploy_id}  # type: ignore[union-attr]
    assert sum(second[placed]["qos"].values()) == 1  # counted once, by `qos_mix`, as the first plan charged it


async def test_a_request_with_an_unknown_scorer_fails_alone_naming_the_field() -> None:
    store = InMemoryStore()
    store.add_pod("p1")
    store.add_node("p1", NodeResources("n1", {"0": 100, "1": 100}, 8 * GIB))
    api = {"name": "api", "image": "busybox", "resources": {"cpu_request": 0.5, "memory_request": "1GiB"}}
    bad = _item(workload=api, mode="score", options={"scorers": {"nope": 1}})
    answers = await commit_batch(_context(store), "p1", [bad, _item(workload=api, mode="score")])
    assert isinstance(answers[0], InvalidInput)
    assert answers[0].details["field"] == "options.scorers.nope"
    assert isinstance(answers[1], Accepted)
    assert len(store.containers) == 1
    assert len(store.decisions) == 1


async def test_a_tenant_limit_counts_what_the_batch_planned_before() -> None:
    from fractions import Fraction

    from eru.fairness.drf import Tenant

    store = InMemoryStore()
    store.add_pod("p1")
    store.add_tenant(Tenant("team", limit={"cpu": Fraction(2)}))
    store.add_node("p1", NodeResources("n1", {str(core): 100 for core in range(8)}, 8 * GIB))
    web = {"name": "web", "image": "busybox", "tenant": "team", "resources": {"cpu_bind": True, "cpu_request": 1}}
    answers = await commit_batch(_context(store), "p1", [_item(workload=web, request_id=f"r{i}") for i in range(3)])
    assert [type(answer) for answer in answers] == [Accepted, Accepted, PlanningFailure]
    assert answers[2].code == "tenant_limit"  # type: ignore[union-attr]
    assert "has 2, needs 1 more, limit 2" in answers[2].message  # type: ignore[union-attr]
    assert {row.kind for row in store.decisions.values()} == {"deploy", "admission"}


async def test_a_later_batch_stores_only_the_changed_nodes_and_its_decisions_read_back_whole() -> None:
    # docs/replay.md "A batch's snapshot, stored once": the second batch's row is a change of the first's
    stores = [InMemoryStore(), InMemoryStore()]
    for store in stores:
        store.add_pod("p1")
        for name in ("n1", "n2", "n3", "n4"):
            store.add_node("p1", NodeResources(name, {str(core): 100 for core in range(4)}, 8 * GIB))
    web = {"name": "web", "image": "busybox", "resources": {"cpu_bind": True, "cpu_request": 1}}
    chained, alone = _context(stores[0]), _context(stores[1])
    for batch in range(3):
        items = [_item(workload=web, count=1, request_id=f"r{batch}")]
        alone.chains.clear()  # no base: every row whole
        for ctx in (chained, alone):
            assert isinstance((await commit_batch(ctx, "p1", items))[0], Accepted)
    rows = [[json.loads(row.nodes) for row in store.decision_snapshots.values()] for store in stores]
    assert [BASE_KEY in row for row in rows[0]] == [False, True, True]
    assert [BASE_KEY in row for row in rows[1]] == [False, False, False]
    assert [len(row) for row in rows[0][1:]] == [2, 2]  # the node the previous batch charged, and the base's id
    inputs = [[store.decision_input(key) for key in store.decisions] for store in stores]
    assert inputs[0] == inputs[1]
