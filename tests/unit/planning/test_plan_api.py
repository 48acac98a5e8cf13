"""`eru plan` problems solved in-process: kinds, lazy kinds, error shapes, the resource explanation of failures."""

from __future__ import annotations

from typing import Any

import pytest

from eru import plan_api
from eru.errors import InvalidInput, PlanningFailure

GIB = 1 << 30


def node(name: str, cores: int, memory: int | str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "cpu_map": {str(core): 100 for core in range(cores)}, "memory": memory, **extra}


def test_unavailable_lazy_kind_is_invalid_input(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(plan_api.KINDS, "ghost", "eru.no_such_package.plan_kind:solve_ghost")
    with pytest.raises(InvalidInput) as error:
        plan_api.solve({"kind": "ghost"})
    assert error.value.field == "kind"
    assert "kind ghost is not available" in error.value.message


def test_lazy_kind_with_missing_function_is_invalid_input(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(plan_api.KINDS, "half", "eru.plan_api:no_such_function")
    with pytest.raises(InvalidInput, match="kind half is not available"):
        plan_api.solve({"kind": "half"})


def test_unknown_kind_lists_the_known_ones() -> None:
    with pytest.raises(InvalidInput) as error:
        plan_api.solve({"kind": "teleport"})
    assert "capacity" in error.value.message
    assert "deploy" in error.value.message


def test_failure_names_the_short_resource_per_node() -> None:
    problem = {
        "count": 30,
        "request": {"cpu_bind": True, "cpu_request": 1, "memory_request": "1GiB"},
        "nodes": [node("small-memory", 8, "2GiB"), node("few-cores", 2, "64GiB")],
    }
    with pytest.raises(PlanningFailure) as failure:
        plan_api.solve(problem)
    details = failure.value.details
    assert details["need"] == 30
    assert details["available"] == 4
    assert details["resources"]["small-memory"]["limited_by"] == "memory"
    assert details["resources"]["small-memory"]["memory_bound"] == 2
    assert details["resources"]["small-memory"]["cpu_bound"] == 8
    assert details["resources"]["few-cores"]["limited_by"] == "cpu"
    assert details["limited_by"] == {"memory": 1, "cpu": 1}
    assert "limited by" in failure.value.message


def test_memory_prime_failure_names_cores() -> None:
    problem = {"count": 1, "request": {"cpu_request": 4, "memory_request": "1GiB"}, "nodes": [node("a", 2, "8GiB")]}
    with pytest.raises(PlanningFailure) as failure:
        plan_api.solve(problem)
    assert failure.value.details["resources"]["a"]["limited_by"] == "cores"


@pytest.mark.parametrize(
    ("problem", "field"),
    [
        ({"nodes": [{"name": "a", "capacity": 1}, {"name": "a", "capacity": 2}]}, "nodes[1].name"),
        ({"nodes": [], "colour": "red"}, "colour"),
        ({"nodes": [{"name": "a", "capacity": -1}]}, "capacity"),
        ({"nodes": [node("a", 2, "1GiB", used={"cpu_map": {"9": 10}})]}, "nodes[0].used.cpu_map.9"),
        ({"nodes": [node("a", 2, -5)]}, "nodes[0].memory"),
        ({"nodes": "all of them"}, "nodes"),
        ({"kind": "capacity", "nodes": [], "plans": "yes"}, "plans"),
        ({"kind": "realloc", "node": node("a", 2, "1GiB"), "origin": {"cpu_map": {"0": "x"}}}, "origin.cpu_map.0"),
    ],
)
def test_malformed_problems_name_the_field(problem: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as error:
        plan_api.solve(problem)
    assert error.value.field == field


def test_capacity_only_nodes_exercise_the_mode_alone() -> None:
    problem = {
        "mode": "each",
        "count": 3,
        "nodes": [{"name": name, "capacity": capacity} for name, capacity in zip("ABCD", (5, 3, 7, 4), strict=True)],
    }
    answer = plan_api.solve(problem)
    assert answer == {
        "deploy": {"A": 3, "B": 3, "C": 3, "D": 3},
        "capacity": {"A": 5, "B": 3, "C": 7, "D": 4},
        "total": 12,
        "containers": [],
    }


def test_same_problem_same_answer() -> None:
    problem = {
        "mode": "global",
        "count": 7,
        "request": {"cpu_bind": True, "cpu_request": 0.7, "memory_request": "512MiB"},
        "nodes": [node(f"n{index}", 4 + index, f"{2 + index}GiB", used={"cpu_map": {"0": 30}}) for index in range(4)],
    }
    assert plan_api.solve(problem) == plan_api.solve(problem)


def test_score_mode_scores_the_nodes_real_resources() -> None:
    problem = {
        "mode": "score",
        "count": 1,
        "options": {"scorers": {"least-allocated": 1}},
        "request": {"cpu_bind": True, "cpu_request": 1, "memory_request": "1GiB"},
        "nodes": [
            node("memory-full", 4, "10GiB", used={"memory": "9GiB"}),
            node("cpu-half", 4, "10GiB", used={"cpu_map": {"0": 100, "1": 100}}),
        ],
    }
    # By CPU usage alone (the capacity-only fallback) memory-full would win; by CPU and memory, cpu-half does.
    assert plan_api.solve(problem)["deploy"] == {"cpu-half": 1}
