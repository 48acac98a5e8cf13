"""`eru plan` kind `evict` (docs/planning.md): the documented example, invalid problems, and a recorded input
reproducing itself."""

from __future__ import annotations

import json
from typing import Any

import pytest
from coloc_builders import GIB, problem, sample

from eru.colocation.config import parse_config
from eru.colocation.plan_kind import (
    build_window,
    evict_problem,
    parse_containers,
    parse_node,
    parse_sample,
    solve_evict,
)
from eru.colocation.policy import NodeState
from eru.errors import InvalidInput

DOCUMENTED_EXAMPLE: dict[str, Any] = {
    "config": {
        "cpu_forbid": 65,
        "cpu_suppress": 65,
        "cpu_evict": 75,
        "memory_forbid": 65,
        "memory_evict": 70,
        "satisfaction_lower": 60,
        "satisfaction_upper": 80,
        "batch_util_threshold": 90,
        "window_seconds": 300,
        "cpu_cooldown_seconds": 20,
        "memory_cooldown_seconds": 4,
        "metrics_interval_seconds": 5,
    },
    "node": {"name": "n1", "cpu": 32, "memory": 68719476736},
    "now": 1000.0,
    "last_cpu_eviction": None,
    "last_memory_eviction": None,
    "containers": [{"id": "c1", "class": "prod", "priority": 5, "cpu_request": 2, "memory_request": 1073741824}],
    "samples": [
        {
            "time": 995.0,
            "node_cpu_used": 20.5,
            "node_memory_used": 40000000000,
            "batch_cpu_allowed": 4.0,
            "containers": {"c1": {"cpu_used": 1.9, "memory_used": 900000000}},
        }
    ],
}


def test_spec_example_answers_in_the_spec_shape() -> None:
    answer = solve_evict(DOCUMENTED_EXAMPLE)
    assert set(answer) == {"forbid_schedule", "suppress", "evict", "explain"}
    assert answer["forbid_schedule"] == {"cpu": False, "memory": False}  # 64 % CPU, 58 % memory
    assert answer["evict"] == []
    assert answer["suppress"] is None  # no batch container to suppress
    json.dumps(answer)  # JSON all the way down


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("node", "cpu"), 0, "node.cpu"),
        (("node", "memory"), "lots", "node.memory"),
        (("node", "name"), "", "node.name"),
        (("now",), "soon", "now"),
        (("containers", 0, "class"), "gold", "containers[0].class"),
        (("containers", 0, "priority"), 1.5, "containers[0].priority"),
        (("containers", 0, "cpu_request"), -1, "containers[0].cpu_request"),
        (("samples", 0, "time"), 1000.5, "samples[0].time"),
        (("samples", 0, "node_cpu_used"), None, "samples[0].node_cpu_used"),
        (("samples", 0, "containers", "c1", "memory_used"), -5, "samples[0].containers.c1.memory_used"),
        (("config", "cpu_evict"), 60, "config.cpu_suppress"),  # same layer: the lower one is named
        (("samples",), {}, "samples"),
    ],
)
def test_invalid_problem_names_the_field(path: tuple[Any, ...], value: Any, field: str) -> None:
    bad = json.loads(json.dumps(DOCUMENTED_EXAMPLE))
    target = bad
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(InvalidInput) as caught:
        solve_evict(bad)
    assert caught.value.field == field


def test_duplicate_container_id_is_rejected() -> None:
    bad = problem()
    bad["containers"].append(dict(bad["containers"][2]))
    with pytest.raises(InvalidInput, match="duplicate container id 'b1'"):
        solve_evict(bad)


def test_human_memory_strings_are_accepted() -> None:
    p = json.loads(json.dumps(DOCUMENTED_EXAMPLE))
    p["node"]["memory"] = "64GiB"
    assert solve_evict(p)["forbid_schedule"]["memory"] is False


def test_recorded_input_reproduces_the_decision() -> None:
    original = problem(
        every=lambda t: sample(t, node_memory=46 * GIB),
        last_memory_eviction=900.0,
        forbid_schedule={"cpu": True, "memory": False},
        pending_evictions=["b3"],
    )
    # Shuffle in a duplicate and an out-of-order sample: the window resolves them the same way on replay.
    original["samples"].insert(10, dict(original["samples"][30]))
    original["samples"].append(original["samples"][-5])
    first = solve_evict(original)
    config = parse_config(original["config"])
    node = parse_node(original["node"])
    registry = parse_containers(original["containers"])
    window = build_window(
        config, node, registry, [parse_sample(s, f"samples[{i}]") for i, s in enumerate(original["samples"])]
    )
    state = NodeState(None, 900.0, True, False, frozenset({"b3"}))
    recorded = json.loads(json.dumps(evict_problem(config, node, original["now"], state, registry, window.points())))
    assert len(recorded["samples"]) == 60
    assert solve_evict(recorded) == first
    assert first["evict"]  # the example really decides something
