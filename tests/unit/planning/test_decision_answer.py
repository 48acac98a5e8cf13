"""A recorded deploy answer names only the nodes placed on (docs/replay.md "A decision's answer, the nodes placed
on"): `full_answer` puts every other node's capacity back from the recorded input, exactly `eru plan`'s answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eru.decision_answer import full_answer, is_compact
from eru.plan_api import deploy_problem, solve
from eru.planning.decide import decide
from eru.planning.plan import CAPACITY_LISTED, Plan, Rejection
from eru.replay import RecordedDecision, replay

RECORDED: list[dict[str, Any]] = json.loads((Path(__file__).parents[2] / "fixtures" / "decisions.json").read_text())
GiB = 1 << 30


def _node(name: str, cores: int, used: dict[str, int] | None = None, memory: int = 16 * GiB) -> dict[str, Any]:
    node: dict[str, Any] = {"name": name, "cpu_map": {str(core): 100 for core in range(cores)}, "memory": memory}
    if used:
        node["used"] = {"cpu_map": used, "memory": 0}
    return node


def _problem(mode: str, count: int, **extra: Any) -> dict[str, Any]:
    """Eight nodes of different sizes and use, 1 core + 1 GiB an instance."""
    nodes = [
        _node("a", 8),
        _node("b", 4, {"0": 100, "1": 50}),
        _node("c", 16),
        _node("d", 2),
        _node("e", 6, {"0": 100, "1": 100, "2": 100}),
        _node("f", 12, memory=4 * GiB),
        _node("g", 1, {"0": 100}),
        _node("h", 32),
    ]
    return {
        "kind": "deploy",
        "mode": mode,
        "count": count,
        "request": {"cpu_request": 1, "memory_request": GiB},
        "nodes": nodes,
        **extra,
    }


def _recorded(problem: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The answer as the allocator records it (through JSON, as stored) and as `eru plan` prints it."""
    outcome = decide(*deploy_problem(problem))
    assert isinstance(outcome, Plan), outcome
    return json.loads(json.dumps(outcome.recorded_answer())), outcome.answer()


LABELS = {name: {"disk": "ssd" if name in "aceh" else "hdd"} for name in "abcdefgh"}
PROBLEMS = {
    "auto": _problem("auto", 5),
    "auto on every node": _problem("auto", 20),
    "fill": _problem("fill", 2),
    "each": _problem("each", 1),
    "auto, a node limit": _problem("auto", 6, nodes_limit=2),
    "no instance": _problem("auto", 0),
    "a node filter": _problem("auto", 2, node_filter={"labels": {"disk": "ssd"}}, node_labels=LABELS),
    "a node filter naming nodes": _problem(
        "fill", 1, node_filter={"nodes": ["b", "c"], "exclude_nodes": ["c"]}, node_labels=LABELS
    ),
    "unschedulable nodes": _problem("auto", 3, unschedulable={"h": {"cordoned": True}, "c": {"down": True}}),
    "withheld": _problem("auto", 3, withheld={"a": {"cpu": 6, "memory": 0}}),
    "eviction memory": _problem(
        "auto",
        3,
        workload="w",
        now=1240.0,
        evictions=[{"workload": "w", "instance": "c1", "node": "h", "time": 1000.0}],
    ),
    **{
        f"recorded {index} ({entry['input']['mode']})": entry["input"]
        for index, entry in enumerate(RECORDED)
        if "error" not in entry["output"]
    },
}


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_a_compact_answer_expands_to_exactly_the_full_answer(name: str) -> None:
    problem = PROBLEMS[name]
    compact, full = _recorded(problem)
    assert set(compact["capacity"]) == set(compact["deploy"]), "only the nodes placed on"
    assert is_compact(compact) is (len(full["capacity"]) > len(full["deploy"])), "a plan on every node is written whole"
    assert full_answer(problem, compact) == full
    assert list(full_answer(problem, compact)["capacity"]) == list(full["capacity"]), "in node order"
    assert full == solve(problem), "what `eru plan` prints"
    assert (
        compact.get("avoided")
        == full.get("avoided")
        == ({"h": full["avoided"]["h"]} if "evictions" in problem else None)
    )
    assert replay(RecordedDecision("d1", "deploy", problem, compact)).same


def test_the_full_answer_lists_nodes_the_compact_one_leaves_out() -> None:
    compact, full = _recorded(PROBLEMS["a node filter"])
    assert set(full["capacity"]) == {"a", "c", "e", "h"}, "the nodes the filter matches"
    assert len(compact["capacity"]) < len(full["capacity"])
    assert is_compact(compact)
    assert not is_compact(full)
    everywhere, whole = _recorded(PROBLEMS["recorded 0 (auto)"])  # 5 instances on all of 3 nodes
    assert everywhere == whole
    assert full_answer(PROBLEMS["recorded 0 (auto)"], everywhere) == whole


def test_a_refusal_and_a_record_from_before_read_as_they_are() -> None:
    refused = _problem("auto", 10_000)
    rejection = decide(*deploy_problem(refused))
    assert isinstance(rejection, Rejection)
    answer = json.loads(json.dumps(rejection.answer()))
    assert full_answer(refused, answer) == answer
    assert replay(RecordedDecision("d2", "deploy", refused, answer)).same
    for entry in RECORDED:  # full answers recorded before the compact form
        assert full_answer(entry["input"], entry["output"]) == entry["output"]
        assert replay(RecordedDecision(entry["id"], "deploy", entry["input"], entry["output"])).same


def test_replay_still_checks_the_recorded_capacities_and_placements() -> None:
    problem = PROBLEMS["auto"]
    compact, _ = _recorded(problem)
    placed = next(iter(compact["deploy"]))
    tampered = {**compact, "capacity": {**compact["capacity"], placed: compact["capacity"][placed] + 1}}
    outcome = replay(RecordedDecision("d3", "deploy", problem, tampered))
    assert outcome.differences == [
        f"capacity.{placed}: recorded {compact['capacity'][placed] + 1}, replay gives {compact['capacity'][placed]}"
    ]
    ghost = {**compact, "capacity": {**compact["capacity"], "ghost": 3}}
    assert replay(RecordedDecision("d4", "deploy", problem, ghost)).differences == [
        "capacity.ghost: recorded 3, missing from the replay"
    ]


def test_a_compact_answer_whose_input_no_longer_validates_reads_as_recorded() -> None:
    compact, _ = _recorded(PROBLEMS["a node filter"])
    assert CAPACITY_LISTED in compact
    broken = {**PROBLEMS["a node filter"], "mode": 7}
    assert full_answer(broken, compact) == compact
