"""The deploy decision over an immutable snapshot (docs/pipeline.md "The decision"), fed with decision records of a
real run (tests/fixtures/decisions.json, recorded by tests/integration/pipeline/test_one_decision.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from eru.cli.plan_commands import plan_outcome
from eru.errors import InvalidInput, PlanningFailure
from eru.plan_api import deploy_problem, solve
from eru.planning import NodeResources, PlanningConfig, normalize_request, plan_deploy
from eru.planning.decide import conclude, decide, place_locally, record, stage
from eru.planning.modes import place
from eru.planning.plan import Plan, Rejection
from eru.planning.snapshot import ClusterSnapshot, DeployAsk

RECORDED: list[dict[str, Any]] = json.loads((Path(__file__).parents[2] / "fixtures" / "decisions.json").read_text())


@pytest.mark.parametrize("recorded", RECORDED, ids=[f"{r['input']['mode']}-{r['input']['count']}" for r in RECORDED])
def test_a_recorded_decision_gives_its_recorded_answer_through_every_entry_point(recorded: dict[str, Any]) -> None:
    problem, output = recorded["input"], recorded["output"]
    snapshot, ask = deploy_problem(problem)
    outcome = decide(snapshot, ask)
    assert outcome.answer() == output  # the pure decision
    staged = stage(snapshot, ask)
    try:  # what the allocator does: the distributor runs `place` over the staged slots
        placed: Any = place(ask.mode, staged.slots(), staged.placement)
    except PlanningFailure as failure:
        placed = failure
    assert conclude(staged, placed).answer() == output
    assert json.loads(record(staged)) == {**problem, "nodes": problem["nodes"]}  # the record re-made as it was
    cli = plan_outcome(json.dumps(problem), as_json=True)  # `eru plan --json`, what it prints and how it exits
    assert (cli.code, json.loads(cli.stdout)) == (1 if "error" in output else 0, output)
    if "error" in output:
        with pytest.raises(PlanningFailure) as refused:
            solve(problem)
        assert refused.value.to_dict() == output["error"]
        return
    assert solve(problem) == output  # `eru plan` and the plan API
    sim = plan_deploy(
        snapshot.nodes,
        ask.request,
        snapshot.config,
        mode=ask.mode,
        count=ask.count,
        counts=snapshot.workload_counts(ask.workload),
        options=ask.options,
    )
    assert [plan.to_dict() for plan in sim.containers] == output["containers"]  # `eru sim`


CONFIG = PlanningConfig()


def _ask(count: int, workload: str = "web", **resources: Any) -> DeployAsk:
    request = normalize_request(resources or {"cpu_bind": True, "cpu_request": 1}, CONFIG)
    return DeployAsk(request, "auto", count, workload=workload, tenant="t", resources=resources)


def _snapshot(*nodes: tuple[str, int]) -> ClusterSnapshot:
    return ClusterSnapshot(
        config=CONFIG,
        nodes=tuple(NodeResources(name, {str(c): 100 for c in range(cores)}, 8 << 30) for name, cores in nodes),
        qos={},
    )


def test_charging_a_snapshot_leaves_it_unchanged_and_the_next_decision_sees_the_charge() -> None:
    snapshot = _snapshot(("n1", 2), ("n2", 2))
    ask = _ask(3)
    first = decide(snapshot, ask)
    assert isinstance(first, Plan)
    assert first.placements == {"n1": 2, "n2": 1}
    after = snapshot.charged(ask, first.containers, first.placements)
    assert all(not node.used_cpu_map for node in snapshot.nodes)  # the input is untouched
    assert snapshot.workload_counts("web") == {}
    assert after.workload_counts("web") == {"n1": 2, "n2": 1}
    assert sum(after.qos["n1"].values()) == 2  # type: ignore[index]
    second = decide(after, _ask(1))
    assert isinstance(second, Plan)
    assert second.placements == {"n2": 1}
    assert isinstance(decide(after.charged(_ask(1), second.containers, second.placements), _ask(1)), Rejection)


def test_no_node_left_is_a_rejection_naming_the_pod() -> None:
    snapshot = ClusterSnapshot(config=CONFIG, nodes=(), pod="p1")
    outcome = decide(snapshot, _ask(1))
    assert isinstance(outcome, Rejection)
    assert outcome.failure.code == "no_schedulable_node"
    assert "pod 'p1'" in outcome.failure.message


def test_a_batch_ask_skips_nodes_whose_condition_forbids_batch() -> None:
    snapshot = ClusterSnapshot(
        config=CONFIG, nodes=_snapshot(("n1", 4), ("n2", 4)).nodes, forbid_batch=frozenset({"n1"})
    )
    request = normalize_request({"cpu_bind": True, "cpu_request": 1}, CONFIG)
    batch = DeployAsk(replace(request, batch=True), "auto", 2)
    outcome = decide(snapshot, batch)
    assert isinstance(outcome, Plan)
    assert outcome.placements == {"n2": 2}
    assert isinstance(decide(snapshot, DeployAsk(request, "auto", 2)), Plan)


@pytest.mark.parametrize(
    ("placed", "field"), [({"n9": 1}, "placements.n9"), ({"n1": 99}, "placements.n1"), ({"n1": -1}, "placements.n1")]
)
def test_a_faulty_placement_is_invalid_input_naming_the_node(placed: dict[str, int], field: str) -> None:
    staged = stage(_snapshot(("n1", 2)), _ask(1))
    with pytest.raises(InvalidInput) as error:
        conclude(staged, placed)
    assert error.value.details["field"] == field


def test_place_locally_returns_the_modes_failure_instead_of_raising() -> None:
    staged = stage(_snapshot(("n1", 1)), _ask(5))
    failure = place_locally(staged)
    assert isinstance(failure, PlanningFailure)
    rejection = conclude(staged, failure)
    assert isinstance(rejection, Rejection)
    assert rejection.failure.details["resources"]["n1"]["limited_by"] == "cpu"
