"""Every node a deploy decision does not place on is named with its reason and numbers (docs/planning.md "Nodes left
out"): forbid watermark, cordoned, down, avoided, too small — in the refusal, the record, its replay and `eru
explain`."""

from __future__ import annotations

import json
from dataclasses import replace

from eru.decision_view import explain_deploy_decision
from eru.plan_api import deploy_problem
from eru.planning import NodeResources, PlanningConfig, normalize_request
from eru.planning.decide import decide, record, stage
from eru.planning.left_out import NodeState, Watermark, summary, unschedulable
from eru.planning.plan import Plan, Rejection
from eru.planning.snapshot import ClusterSnapshot, DeployAsk
from eru.replay import RecordedDecision, replay

CONFIG = PlanningConfig()
GIB = 1024**3


def _node(name: str, cores: int, used: int = 0) -> NodeResources:
    return NodeResources(
        name=name,
        cpu_map={str(i): 100 for i in range(cores)},
        memory=16 * GIB,
        used_cpu_map={str(i): 100 for i in range(used)},
    )


def _batch(cores: int, count: int = 1) -> DeployAsk:
    request = normalize_request({"cpu_bind": True, "cpu_request": cores, "memory_request": GIB}, CONFIG)
    resources = {"cpu_bind": True, "cpu_request": cores, "memory_request": GIB}
    return DeployAsk(replace(request, batch=True), "auto", count, resources=resources)


def _cpu_at(percent: float) -> tuple[Watermark, ...]:
    return (Watermark("cpu", percent, 70),)


def test_every_node_at_forbid_is_named_with_its_numbers() -> None:
    nodes = (_node("n1", 8), _node("n2", 8), _node("n3", 8))
    marks = {"n1": _cpu_at(82), "n2": _cpu_at(75.5), "n3": (Watermark("memory", 91, 90),)}
    snapshot = ClusterSnapshot(
        config=CONFIG, nodes=nodes, forbid_batch=frozenset(marks), watermarks=marks, pod="default"
    )
    outcome = decide(snapshot, _batch(1))
    assert isinstance(outcome, Rejection)
    failure = outcome.failure
    assert failure.message == (
        "pod 'default' has no node for this request: 3 at forbid watermark "
        "(n1 cpu 82% ≥ 70%, n2 cpu 75.5% ≥ 70%, n3 memory 91% ≥ 90%)"
    )
    assert failure.details["left_out_counts"] == {"forbid_watermark": 3}
    reasons = {entry["node"]: entry for entry in failure.details["left_out"]}
    assert reasons["n1"]["reason"] == "forbid_watermark"
    assert reasons["n1"]["why"] == "forbid watermark: batch class, cpu 82% ≥ forbid 70%"
    assert reasons["n1"]["numbers"] == {"cpu": {"percent": 82, "watermark": 70}}
    prod = DeployAsk(normalize_request({"cpu_bind": True, "cpu_request": 1}, CONFIG), "auto", 1)
    assert isinstance(decide(snapshot, prod), Plan)  # prod never sees watermarks


def test_mixed_reasons_are_counted_and_named_per_reason() -> None:
    nodes = (_node("n1", 8), _node("n2", 4, used=3), _node("n3", 8))
    snapshot = ClusterSnapshot(
        config=CONFIG,
        nodes=nodes,
        forbid_batch=frozenset({"n1"}),
        watermarks={"n1": _cpu_at(82)},
        unschedulable={"n4": NodeState(cordoned=True), "n5": NodeState(down=True, silent_seconds=45)},
        pod="default",
    )
    outcome = decide(snapshot, _batch(2, count=2))
    assert isinstance(outcome, Plan)
    assert outcome.placements == {"n3": 2}
    refused = decide(snapshot, _batch(2, count=9))
    assert isinstance(refused, Rejection)
    message = refused.failure.message
    assert message.startswith("auto: need 9 new instances but 2 nodes have capacity for 4")
    assert message.endswith(
        "; not chosen: 1 at forbid watermark (n1 cpu 82% ≥ 70%), 1 cordoned (n4), "
        "1 down (n5 no heartbeat for 45 s), 1 too small (n2 needs 2 cores, 1 free)"
    )
    counts = refused.failure.details["left_out_counts"]
    assert counts == {"forbid_watermark": 1, "cordoned": 1, "down": 1, "too_small": 1}
    whys = {entry["node"]: entry["why"] for entry in refused.failure.details["left_out"]}
    assert whys == {
        "n1": "forbid watermark: batch class, cpu 82% ≥ forbid 70%",
        "n2": "too small: needs 2 cores, 1 free",
        "n4": "cordoned",
        "n5": "down (no heartbeat for 45 s)",
    }


def test_the_record_replays_the_same_and_explain_lists_every_node() -> None:
    nodes = (_node("n1", 8), _node("n2", 8))
    snapshot = ClusterSnapshot(
        config=CONFIG,
        nodes=nodes,
        forbid_batch=frozenset({"n1", "n2"}),
        watermarks={"n1": _cpu_at(82), "n2": _cpu_at(90)},
        unschedulable={"n3": NodeState(cordoned=True)},
        pod="default",
    )
    ask = _batch(1)
    staged = stage(snapshot, ask)
    problem = json.loads(record(staged))
    assert problem["pod"] == "default"
    assert problem["unschedulable"] == {"n3": {"cordoned": True}}
    assert problem["forbid_batch"]["n1"] == {"cpu": {"percent": 82, "watermark": 70}}
    outcome = decide(snapshot, ask)
    assert isinstance(outcome, Rejection)
    replayed = replay(RecordedDecision("d1", "deploy", problem, outcome.answer()))
    assert replayed.same, replayed.differences
    again, again_ask = deploy_problem(problem)
    assert decide(again, again_ask).answer() == outcome.answer()
    view = explain_deploy_decision(problem, outcome.answer())
    assert [(n["node"], n["reason"]) for n in view["not_chosen"]] == [
        ("n3", "cordoned"),
        ("n1", "forbid_watermark"),
        ("n2", "forbid_watermark"),
    ]
    assert view["not_chosen_counts"] == {"cordoned": 1, "forbid_watermark": 2}
    assert view["not_chosen"][1]["why"] == "forbid watermark: batch class, cpu 82% ≥ forbid 70%"


def test_a_huge_pod_names_a_few_nodes_and_counts_the_rest() -> None:
    states = {f"n{i:04}": NodeState(cordoned=True) for i in range(1000)}
    snapshot = ClusterSnapshot(config=CONFIG, nodes=(), unschedulable=states, pod="big")
    outcome = decide(snapshot, _batch(1))
    assert isinstance(outcome, Rejection)
    assert outcome.failure.message == (
        "pod 'big' has no node for this request: 1000 cordoned (n0000, n0001, n0002, … and 997 more)"
    )
    assert len(outcome.failure.details["left_out"]) == 100
    assert outcome.failure.details["left_out_counts"] == {"cordoned": 1000}
    problem = json.loads(record(stage(snapshot, _batch(1))))
    assert len(problem["unschedulable"]) == 1000  # the record keeps every node
    view = explain_deploy_decision(problem, outcome.answer())
    assert view["not_chosen_total"] == 1000


def test_a_pod_without_nodes_says_none_registered() -> None:
    outcome = decide(ClusterSnapshot(config=CONFIG, nodes=(), pod="p1"), _batch(1))
    assert isinstance(outcome, Rejection)
    assert outcome.failure.message == "pod 'p1' has no node for this request: none registered"


def test_down_before_cordoned_and_marked_down_without_silence() -> None:
    both = unschedulable("n1", NodeState(cordoned=True, down=True))
    assert (both.reason, both.why) == ("down", "down (marked down)")
    assert summary([both, unschedulable("n2", NodeState(cordoned=True))]) == "1 cordoned (n2), 1 down (n1 marked down)"
