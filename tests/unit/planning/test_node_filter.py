"""Node filters (docs/placement-modes.md "Node filters"): the reason `filtered` names the part that left a node out,
in the refusal and in `eru explain`; a filter naming an unknown node or matching nothing is refused naming its part,
in the decision, in `eru plan` problems and on the command line (exit 2, one line naming the option)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from eru.cli import commands  # noqa: F401  (registers every verb)
from eru.cli.app import app
from eru.decision_view import explain_deploy_decision
from eru.domain import DeployRequest
from eru.errors import InvalidInput
from eru.plan_api import solve
from eru.planning import NodeResources, PlanningConfig, normalize_request
from eru.planning.decide import decide, record, stage
from eru.planning.left_out import NodeState
from eru.planning.node_filter import node_filter
from eru.planning.plan import Plan, Rejection
from eru.planning.snapshot import ClusterSnapshot, DeployAsk

CONFIG = PlanningConfig()
GIB = 1024**3
LABELS = {"n1": {"disk": "ssd"}, "n2": {"disk": "hdd"}, "n3": {}, "n4": {"disk": "ssd"}}
runner = CliRunner()


def _snapshot() -> ClusterSnapshot:
    nodes = tuple(
        NodeResources(name=name, cpu_map={str(i): 100 for i in range(2)}, memory=8 * GIB) for name in ("n1", "n2", "n3")
    )
    return ClusterSnapshot(
        config=CONFIG, nodes=nodes, unschedulable={"n4": NodeState(cordoned=True)}, labels=LABELS, pod="p"
    )


def _ask(count: int, **parts: Any) -> DeployAsk:
    resources = {"cpu_bind": True, "cpu_request": 1, "memory_request": GIB}
    return DeployAsk(
        normalize_request(resources, CONFIG), "auto", count, resources=resources, node_filter=node_filter(**parts)
    )


def test_a_refusal_and_explain_name_the_part_that_left_each_node_out() -> None:
    snapshot, ask = _snapshot(), _ask(5, labels={"disk": "ssd"})
    outcome = decide(snapshot, ask)
    assert isinstance(outcome, Rejection)  # n1 has room for 2; n4 has the label but is cordoned
    message = outcome.failure.message
    assert message.endswith(
        "not chosen: 2 filtered (n2 label disk=ssd does not match (disk=hdd), "
        "n3 label disk=ssd does not match (no label disk)), 1 cordoned (n4)"
    )
    assert outcome.failure.details["left_out_counts"] == {"filtered": 2, "cordoned": 1}
    problem = json.loads(record(stage(snapshot, ask)))
    assert problem["node_filter"] == {"labels": {"disk": "ssd"}}
    assert problem["node_labels"] == LABELS
    assert [node["name"] for node in problem["nodes"]] == ["n1"]
    view = explain_deploy_decision(problem, outcome.answer())
    why = {entry["node"]: (entry["reason"], entry["why"]) for entry in view["not_chosen"]}
    assert why["n2"] == ("filtered", "filtered: label disk=ssd does not match (disk=hdd)")
    assert why["n4"] == ("cordoned", "cordoned")
    assert view["not_chosen_counts"] == {"filtered": 2, "cordoned": 1, "room_unused": 1}


def test_nodes_and_exclude_nodes_reasons() -> None:
    outcome = decide(_snapshot(), _ask(1, nodes=["n1", "n2"], exclude_nodes=["n1"]))
    assert isinstance(outcome, Plan)
    assert outcome.placements == {"n2": 1}
    left = {
        entry.node: entry.why
        for entry in stage(_snapshot(), _ask(1, nodes=["n1", "n2"], exclude_nodes=["n1"])).left_out
    }
    assert left == {
        "n1": "filtered: excluded by --exclude-nodes",
        "n3": "filtered: not in --nodes",
        "n4": "filtered: not in --nodes",
    }


@pytest.mark.parametrize(
    ("parts", "field", "reason"),
    [
        ({"nodes": ["n1", "ghost", "n9"]}, "node_filter.nodes", "unknown nodes ghost, n9 (not in pod 'p')"),
        ({"exclude_nodes": ["ghost"]}, "node_filter.exclude_nodes", "unknown node ghost (not in pod 'p')"),
        ({"labels": {"disk": "nvme"}}, "node_filter.labels", "disk=nvme matches no node of pod 'p'"),
        ({"labels": {"disk": "ssd", "zone": "a"}}, "node_filter.labels", "zone=a matches no node of pod 'p'"),
        ({"nodes": ["n2"], "labels": {"disk": "ssd"}}, "node_filter", "the filter --nodes n2 --node-label disk=ssd"),
        ({"nodes": ["n1"], "exclude_nodes": ["n1"]}, "node_filter.exclude_nodes", "excludes every node --nodes names"),
    ],
)
def test_a_filter_naming_unknown_nodes_or_matching_nothing_is_refused_naming_it(
    parts: dict[str, Any], field: str, reason: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        decide(_snapshot(), _ask(1, **parts))
    assert refused.value.field == field
    assert reason in refused.value.reason


def _problem(**extra: Any) -> dict[str, Any]:
    nodes = [{"name": name, "cpu_map": {"0": 100, "1": 100}, "memory": 8 * GIB} for name in ("n1", "n2", "n3")]
    return {"kind": "deploy", "mode": "each", "count": 1, "request": {"cpu_request": 1}, "nodes": nodes, **extra}


def test_plan_problems_take_the_filter_and_refuse_a_malformed_one() -> None:
    labels = {"n1": {"disk": "ssd"}, "n2": {"disk": "ssd"}, "n3": {"disk": "hdd"}}
    answer = solve(_problem(node_filter={"labels": {"disk": "ssd"}, "exclude_nodes": ["n2"]}, node_labels=labels))
    assert answer["deploy"] == {"n1": 1}
    for bad, field in (
        ({"node_filter": {"labels": ["disk=ssd"]}}, "node_filter.labels"),
        ({"node_filter": {"nodes": "n1"}}, "node_filter.nodes"),
        ({"node_filter": {"zones": ["a"]}}, "node_filter.zones"),
        ({"node_filter": {"nodes": ["n1"]}, "node_labels": []}, "node_labels"),
    ):
        with pytest.raises(InvalidInput) as refused:
            solve(_problem(**bad))
        assert refused.value.field == field
    slots = {"kind": "deploy", "count": 1, "nodes": [{"name": "a", "capacity": 2}], "node_filter": {"nodes": ["a"]}}
    with pytest.raises(InvalidInput, match="node_filter: a problem of capacity-only nodes takes no filter"):
        solve(slots)


def test_the_request_bounds_the_filter() -> None:
    request = {"pod": "p", "workload": {"name": "w", "image": "busybox"}}
    with pytest.raises(ValueError, match=r"node_filter\.nodes"):
        DeployRequest.model_validate({**request, "node_filter": {"nodes": [f"n{i}" for i in range(1001)]}})
    with pytest.raises(ValueError, match=r"node_filter\.nodes\.0"):
        DeployRequest.model_validate({**request, "node_filter": {"nodes": ["bad name"]}})
    with pytest.raises(ValueError, match=r"node_filter\.labels"):
        DeployRequest.model_validate({**request, "node_filter": {"labels": {"": "x"}}})


@pytest.mark.parametrize(
    ("options", "line"),
    [
        (["--node-label", "disk"], "--node-label: expected KEY=VALUE, such as disk=ssd (got 'disk')"),
        (["--node-label", "=ssd"], "--node-label: expected KEY=VALUE"),
        (["--node-label", "disk=ssd", "--node-label", "disk=hdd"], "--node-label: disk given twice (ssd, hdd)"),
        (["--nodes", "n1,,n2"], "--nodes: expected node names separated by commas"),
        (["--exclude-nodes", "bad name"], "--exclude-nodes: "),
        (["--nodes", "n1/x"], "--nodes: "),
    ],
)
def test_bad_filter_options_are_one_line_naming_the_option(options: list[str], line: str, tmp_path: Path) -> None:
    args = ["deploy", "--pod", "p", "--image", "busybox", *options, "--state-dir", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert line in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_eru_plan_takes_the_filter_options(tmp_path: Path) -> None:
    path = tmp_path / "problem.json"
    path.write_text(json.dumps(_problem(node_labels={"n1": {"disk": "ssd"}})))
    done = runner.invoke(app, ["plan", str(path), "--node-label", "disk=ssd"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["deploy"] == {"n1": 1}
    refused = runner.invoke(app, ["plan", str(path), "--nodes", "n7"])
    assert refused.exit_code == 2
    assert "node_filter.nodes: unknown node n7 (not in the problem)" in refused.output
    malformed = runner.invoke(app, ["plan", str(path), "--node-label", "disk"])
    assert malformed.exit_code == 2
    assert "--node-label: expected KEY=VALUE" in malformed.output


@pytest.mark.parametrize(
    ("options", "line"),
    [
        (["--label", "disk"], "--label: expected KEY=VALUE to set or KEY- to remove (got 'disk')"),
        (["--label", "-"], "--label: expected KEY=VALUE or KEY- (got '-')"),
        (["--label", "disk=ssd", "--label", "disk-"], "--label: disk is both set and removed"),
        (["--label", "=x"], "--label: expected KEY=VALUE"),
    ],
)
def test_bad_node_labels_are_one_line_naming_the_option(options: list[str], line: str, tmp_path: Path) -> None:
    result = runner.invoke(app, ["node", "set", "n1", *options, "--state-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert line in result.output
