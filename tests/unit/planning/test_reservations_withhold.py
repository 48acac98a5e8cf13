"""What a request may not use because other tenants reserved it (docs/fairness-and-scoring.md), worked by hand."""

from __future__ import annotations

import json

import pytest

from eru.errors import PlanningFailure
from eru.plan_api import solve
from eru.planning import NodeResources
from eru.planning.reservations import Amount, withheld_for, withhold


def test_only_the_other_tenants_unused_reservations_are_withheld() -> None:
    # n1: A reserved 300 pieces (3 cores) and 4 GiB, its containers hold 100 pieces and 1 GiB there → unused 200 / 3
    # GiB withheld from everyone but A; B reserved 100 pieces, holds nothing → 100 withheld from A
    reservations = {"n1": {"A": Amount(300, 4 << 30), "B": Amount(100, 0)}}
    held = {("A", "n1"): Amount(100, 1 << 30)}
    assert withheld_for("C", reservations, held) == {"n1": Amount(300, 3 << 30)}
    assert withheld_for("A", reservations, held) == {"n1": Amount(100, 0)}
    assert withheld_for("B", reservations, held) == {"n1": Amount(200, 3 << 30)}


def test_withheld_pieces_come_off_the_highest_cores() -> None:
    node = NodeResources("n1", {"0": 100, "1": 100, "2": 100, "10": 100}, 8 << 30, used_cpu_map={"2": 40})
    (seen,) = withhold([node], {"n1": Amount(250, 2 << 30)})
    # numeric order from the top: core 10 (100 free) → 100, core 2 (60 free) → 60, core 1 → 90; 250 in all
    assert seen.used_cpu_map == {"2": 100, "10": 100, "1": 90}
    assert seen.used_memory == 2 << 30
    assert node.used_cpu_map == {"2": 40}  # the input is not changed


def test_eru_plan_applies_the_recorded_withheld_amounts() -> None:
    # two 4-core nodes, 3 of n1's cores withheld: 5 one-core instances fit (1 + 4), 6 do not
    nodes = [{"name": n, "cpu_map": {str(i): 100 for i in range(4)}, "memory": 8 << 30} for n in ("n1", "n2")]
    problem = {
        "kind": "deploy",
        "count": 5,
        "request": {"cpu_bind": True, "cpu_request": 1, "memory_request": "1GiB"},
        "nodes": nodes,
        "withheld": {"n1": {"cpu": 3, "memory": 0}},
    }
    answer = solve(json.loads(json.dumps(problem)))
    assert answer["deploy"] == {"n1": 1, "n2": 4}
    assert answer["capacity"] == {"n1": 1, "n2": 4}
    problem["count"] = 6
    with pytest.raises(PlanningFailure) as caught:
        solve(problem)
    assert caught.value.code == "insufficient_capacity"
