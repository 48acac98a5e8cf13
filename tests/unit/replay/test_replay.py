"""Replaying recorded decisions (eru.replay): a faithful record reproduces, a tampered one is reported by path."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from eru.errors import InvalidInput
from eru.plan_api import solve
from eru.replay import RecordedDecision, differences, recorded_eviction, replay

GiB = 1024**3
DEPLOY = {
    "kind": "deploy",
    "config": {"share_base": 100, "max_fragment_cores": -1, "max_deploy_count": 10000},
    "mode": "auto",
    "count": 5,
    "request": {"cpu_bind": True, "cpu_request": 1.5, "memory_request": GiB},
    "nodes": [
        {"name": "n1", "cpu_map": {str(c): 100 for c in range(8)}, "memory": 8 * GiB, "count": 1},
        {"name": "n2", "cpu_map": {str(c): 100 for c in range(8)}, "memory": 8 * GiB, "used": {"cpu_map": {"0": 30}}},
    ],
}
EVICT: dict[str, Any] = {
    "kind": "evict",
    "config": {
        "cpu_evict": 75,
        "cpu_suppress": 65,
        "cpu_forbid": 65,
        "memory_evict": 70,
        "memory_forbid": 65,
        "window_seconds": 300,
        "metrics_interval_seconds": 5,
    },
    "node": {"name": "n1", "cpu": 32, "memory": 64 * GiB},
    "now": 1000.0,
    "containers": [
        {"id": "prod", "class": "prod", "priority": 9, "cpu_request": 20, "memory_request": GiB},
        {"id": "b1", "class": "batch", "priority": 1, "cpu_request": 4, "memory_request": GiB},
        {"id": "b2", "class": "batch", "priority": 2, "cpu_request": 4, "memory_request": GiB},
    ],
    "samples": [
        {
            "time": 1000.0 - 5 * i,
            "node_cpu_used": 30.0,
            "node_memory_used": 20 * GiB,
            "batch_cpu_allowed": 4.0,
            "containers": {"prod": {"cpu_used": 22.0}, "b1": {"cpu_used": 2.0}, "b2": {"cpu_used": 2.0}},
        }
        for i in range(60)
    ],
}


def test_a_faithful_deploy_record_reproduces() -> None:
    output = solve(DEPLOY)
    outcome = replay(RecordedDecision("d1", "deploy", DEPLOY, output))
    assert outcome.same
    assert outcome.differences == []


def test_a_tampered_deploy_record_is_reported_by_path() -> None:
    output = solve(DEPLOY)
    tampered = copy.deepcopy(output)
    tampered["containers"][0]["cpu_map"] = {"3": 150}
    tampered["deploy"]["n1"] += 1
    outcome = replay(RecordedDecision("d1", "deploy", DEPLOY, tampered))
    assert not outcome.same
    assert any(d.startswith("containers[0].cpu_map") for d in outcome.differences)
    assert any(d.startswith("deploy.n1: recorded") for d in outcome.differences)


def test_a_recorded_planning_failure_reproduces_as_the_same_failure() -> None:
    too_many = {**DEPLOY, "count": 500}
    failure = replay(RecordedDecision("d2", "deploy", too_many, {"error": {}})).replayed
    assert "error" in failure
    assert replay(RecordedDecision("d2", "deploy", too_many, failure)).same


def test_an_eviction_event_reproduces_and_a_tampered_victim_does_not() -> None:
    answer = solve(EVICT)
    assert answer["evict"], "the example must evict something"
    event = {
        "decision_id": "e1",
        "input": {k: v for k, v in EVICT.items() if k != "kind"},
        "victims": [{"container_id": v["id"], "reason": v["reason"], "release": v["release"]} for v in answer["evict"]],
    }
    assert replay(recorded_eviction(event)).same
    event["victims"][0]["container_id"] = "prod"
    outcome = replay(recorded_eviction(event))
    assert not outcome.same
    assert outcome.differences[0].startswith("evict[0].id: recorded 'prod'")


def test_what_cannot_be_replayed_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="kind"):
        replay(RecordedDecision("r1", "realloc-group", {"kind": "realloc-group"}, {}))
    with pytest.raises(InvalidInput, match="input"):
        recorded_eviction({"decision_id": "x", "victims": []})


def test_differences_compare_floats_with_tolerance_and_lists_by_length() -> None:
    assert differences({"a": 0.1 + 0.2}, {"a": 0.3}) == []
    assert differences([1, 2], [1]) == ["(root): recorded 2 items, replay gives 1"]
    assert differences({"a": 1}, {"b": 1}) == [
        "a: recorded 1, missing from the replay",
        "b: not recorded, replay gives 1",
    ]
