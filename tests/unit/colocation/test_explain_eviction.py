"""`eru explain` of an eviction decision (docs/colocation.md "Every eviction explained"): the explanation is computed
from the recorded input by the policy's own functions, so it agrees with the decision and is deterministic."""

from __future__ import annotations

import copy
import json

import pytest
from coloc_builders import problem, sample

from eru.colocation.explain import explain_eviction
from eru.colocation.plan_kind import solve_evict
from eru.errors import InvalidInput


def test_chosen_and_not_chosen_containers_each_say_why() -> None:
    recorded = problem()
    explained = explain_eviction(recorded)
    assert [v["id"] for v in explained["evict"]] == [v["id"] for v in solve_evict(recorded)["evict"]] == ["b1", "b2"]
    rows = {row["id"]: row for row in explained["containers"]}
    assert [row["id"] for row in explained["containers"]] == ["b1", "b2", "b3"]  # the CPU victim order
    assert rows["b1"]["chosen"]
    assert rows["b2"]["chosen"]
    assert not rows["b3"]["chosen"]
    assert rows["b1"]["why"].startswith("chosen for CPU satisfaction: rank 1")
    assert "release 5.0 cores" in rows["b1"]["why"]
    assert rows["b3"]["why"].startswith("not needed for CPU")  # priority 2: after the two victims
    assert rows["b3"]["priority"] == 2
    assert rows["b3"]["cpu_rank"] == 3
    assert rows["b1"]["satisfaction_percent"] == 37.5  # 1.5 of 4 cores
    window = explained["window"]
    assert window["node"] == "n1"
    assert window["samples"] == 60
    assert window["covered"]
    assert window["watermarks"]["cpu_evict"] == 75
    assert window["watermarks"]["satisfaction_lower"] == 60
    assert window["window_satisfaction_percent"] == 38.0
    assert all(window["cpu_conditions"].values())
    assert explained["action"] == "evict 2"
    json.dumps(explained)


def test_same_input_gives_the_same_explanation() -> None:
    recorded = problem()
    assert explain_eviction(copy.deepcopy(recorded)) == explain_eviction(json.loads(json.dumps(recorded)))


def test_no_eviction_names_the_condition_that_failed() -> None:
    calm = problem(every=lambda t: sample(t, node_cpu=20.0))  # 62.5 % of 32 cores, below cpu_evict 75 %
    rows = explain_eviction(calm)["containers"]
    assert not any(row["chosen"] for row in rows)
    assert "window node CPU 62.5% is below cpu_evict 75%" in rows[0]["why"]
    assert "node memory" in rows[0]["why"]


def test_cool_down_is_the_back_off_reported() -> None:
    cooling = problem(last_cpu_eviction=990.0)  # 10 s ago, cool-down 20 s
    explained = explain_eviction(cooling)
    assert explained["window"]["backoff"]["cpu_cooldown_left_seconds"] == 10.0
    assert "CPU cool-down" in explained["containers"][0]["why"]


def test_pending_and_budget_kept_containers_say_so() -> None:
    budgets = [{"workload": "w1", "max_unavailable": 1, "window_seconds": 600, "desired": 4, "evictions": [950.0]}]
    recorded = problem(pending_evictions=["b2"], budgets=budgets)
    for entry in recorded["containers"]:
        if entry["id"] in ("b1", "b3"):
            entry["workload"] = "w1"
    rows = {row["id"]: row for row in explain_eviction(recorded)["containers"]}
    assert rows["b2"]["why"].startswith("already commanded to go")
    assert rows["b1"]["budget_left"] == 0
    assert not rows["b1"]["chosen"]
    assert "budget" in rows["b1"]["why"]


def test_a_broken_input_names_the_field() -> None:
    broken = problem()
    broken["node"]["cpu"] = 0
    with pytest.raises(InvalidInput) as caught:
        explain_eviction(broken)
    assert caught.value.field == "node.cpu"
