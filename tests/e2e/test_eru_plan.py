"""`eru plan` end to end, as a user runs it: a subprocess, JSON on stdin or in a file, exit codes 0 / 1 / 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ERU = [sys.executable, "-m", "eru.cli", "plan"]
GIB = 1 << 30


def run(problem: str | dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    text = problem if isinstance(problem, str) else json.dumps(problem)
    return subprocess.run([*ERU, *args], input=text, capture_output=True, text=True, timeout=60, check=False)


def resource_node(name: str, cores: int, memory: int = 64 * GIB, **extra: Any) -> dict[str, Any]:
    return {"name": name, "cpu_map": {str(core): 100 for core in range(cores)}, "memory": memory, **extra}


def test_deploy_problem_from_a_file(tmp_path: Path) -> None:
    problem = {
        "mode": "auto",
        "count": 12,
        "request": {"cpu_bind": True, "cpu_request": 1.5, "memory_request": "1GiB"},
        "nodes": [
            resource_node("a", 32, count=10),
            resource_node("b", 4, used={"cpu_map": {"0": 50}, "memory": GIB}),
            {"name": "c", "capacity": 3, "count": 0, "usage": 0.5, "rate": 0.01},
        ],
    }
    path = tmp_path / "problem.json"
    path.write_text(json.dumps(problem))
    result = subprocess.run([*ERU, str(path)], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    # b: core 0 has 50 free (a fragment source) and cores 1-3 are whole: one more fragment core → 2 plans.
    assert answer["capacity"] == {"a": 21, "b": 2, "c": 3}
    assert answer["total"] == 12
    assert sum(answer["deploy"].values()) == 12
    # auto levels b and c up to their capacity first; a, already at 10, takes the rest.
    assert answer["deploy"] == {"a": 7, "b": 2, "c": 3}
    containers = answer["containers"]
    assert len(containers) == answer["deploy"]["a"] + answer["deploy"]["b"]
    for container in containers:
        assert sum(container["cpu_map"].values()) == 150
        assert container["memory"] == GIB


def test_capacity_with_plans_from_stdin() -> None:
    problem = {
        "kind": "capacity",
        "plans": True,
        "request": {"cpu_bind": True, "cpu_request": 1.3},
        "nodes": [
            {"name": "n", "cpu_map": {"0": 100, "1": 100, "2": 400}, "memory": 0, "used": {"cpu_map": {"0": 30}}}
        ],
    }
    result = run(problem, "-")
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["total"] == 4
    assert [plan["cpu_map"] for plan in answer["nodes"]["n"]["plans"]] == [
        {"2": 100, "0": 30},
        {"2": 100, "0": 30},
        {"2": 100, "1": 30},
        {"2": 100, "1": 30},
    ]


def test_realloc_problem() -> None:
    problem = {
        "kind": "realloc",
        "node": resource_node("n", 4, 8 * GIB, used={"cpu_map": {"2": 100, "3": 50}, "memory": GIB}),
        "origin": {"cpu_bind": True, "cpu_request": 1.5, "memory_request": GIB, "cpu_map": {"2": 100, "3": 50}},
        "request": {"cpu_request": 0.5, "memory_request": "512MiB"},
    }
    result = run(problem)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["cpu_map"] == {"2": 100, "3": 100}
    assert answer["cpu_request"] == 2.0
    assert answer["memory_request"] == GIB + GIB // 2


def test_planning_failure_exits_1_with_the_numbers() -> None:
    problem = {
        "count": 30,
        "request": {"cpu_bind": True, "cpu_request": 1.5, "memory_request": GIB},
        "nodes": [resource_node("a", 32, memory=8 * GIB), resource_node("b", 4)],
    }
    result = run(problem)
    assert result.returncode == 1
    error = json.loads(result.stdout)["error"]
    assert error["need"] == 30
    assert error["available"] == 10
    assert error["per_node"]["a"]["capacity"] == 8
    assert error["per_node"]["b"]["capacity"] == 2


def test_malformed_json_exits_2_with_one_line() -> None:
    result = run('{"count": 3,')
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert "malformed JSON" in result.stderr


def test_out_of_range_exits_2_naming_the_field() -> None:
    problem = {"count": -1, "nodes": [{"name": "a", "capacity": 1}]}
    result = run(problem)
    assert result.returncode == 2
    assert result.stderr.strip() == "error: count: must be within 0..1000000000000000, got -1"
    inexact = {"request": {"cpu_bind": True, "cpu_request": 0.333}, "nodes": [resource_node("a", 2)], "count": 1}
    result = run(inexact)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "request.cpu_request" in result.stderr
    assert "not a whole number of pieces" in result.stderr
