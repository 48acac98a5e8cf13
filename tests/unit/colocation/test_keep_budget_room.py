"""Issue 18's pure pieces: budgets, back-offs, peak-sized room, progress-aware victims, refusals that replay."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from coloc_builders import GIB, problem

from eru.colocation.backoff import (
    Eviction,
    KeepConfig,
    avoided_nodes,
    gives_up,
    node_backoff,
    parse_keep_config,
    replacement_delay,
)
from eru.colocation.budget import Budget, WorkloadBudget, parse_budget, take
from eru.colocation.config import resolve_config
from eru.colocation.peak import PeakWindow, peak_room
from eru.colocation.plan_kind import solve_evict
from eru.errors import InvalidInput
from eru.plan_api import solve
from eru.replay import RecordedDecision, replay

# -- budgets ---------------------------------------------------------------------------------------------------------


def test_a_percentage_budget_rounds_up_and_counts_only_its_window() -> None:
    budget = WorkloadBudget("web-batch", Budget(None, 25, 600.0), desired=40, evictions=(100.0, 500.0, 699.0))
    assert budget.budget.allowed(40) == 10
    assert Budget(None, 25).allowed(1) == 1  # 25 % of 1 instance still admits one eviction
    assert budget.used(700.0) == 2  # a time exactly 600 s ago has left the window
    assert budget.used(1100.0) == 1  # 100 and 500 have left it
    assert budget.remaining(700.0) == 8


def test_take_refuses_cpu_victims_over_budget_and_lets_memory_through_only_when_critical() -> None:
    spent = {"w": WorkloadBudget("w", Budget(1, None), desired=4, evictions=(90.0,))}
    victims = [("a", "w", "cpu-satisfaction"), ("b", "w", "memory"), ("c", "other", "cpu-satisfaction")]
    admitted, refused, _ = take(victims, spent, 100.0)
    assert admitted == ["c"]
    assert [(r.id, r.rule) for r in refused] == [("a", "budget"), ("b", "budget")]
    admitted, refused, _ = take(victims, spent, 100.0, critical=True)
    assert admitted == ["b", "c"]
    assert [r.id for r in refused] == ["a"]


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"max_unavailable": "120%"}, "workload.eviction_budget.max_unavailable"),
        ({"max_unavailable": -1}, "workload.eviction_budget.max_unavailable"),
        ({"max_unavailable": "lots"}, "workload.eviction_budget.max_unavailable"),
        ({"window_seconds": 0}, "workload.eviction_budget.window_seconds"),
        ({"max_unavaliable": 3}, "workload.eviction_budget.max_unavaliable"),
    ],
)
def test_a_bad_workload_budget_names_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_budget(raw, "workload.eviction_budget")
    assert caught.value.field == field


def test_pod_budget_settings_are_validated_like_every_colocation_setting() -> None:
    config = resolve_config(("eviction.pods.web", {"max_unavailable": 3, "budget_window_seconds": 300}))
    assert (config.max_unavailable, config.budget_window_seconds) == ("3", 300.0)
    with pytest.raises(InvalidInput) as caught:
        resolve_config(("eviction.pods.web", {"max_unavailable": "101%"}))
    assert caught.value.field == "eviction.pods.web.max_unavailable"
    with pytest.raises(InvalidInput) as caught:
        resolve_config(("eviction.nodes.n1", {"prefer_least_work": "yes"}))
    assert caught.value.field == "eviction.nodes.n1.prefer_least_work"


# -- back-offs -------------------------------------------------------------------------------------------------------


def test_node_backoff_doubles_per_eviction_and_decays_with_the_history() -> None:
    config = KeepConfig()
    assert [node_backoff(k, config) for k in (1, 2, 3, 4)] == [600.0, 1200.0, 2400.0, 3600.0]
    history = [Eviction("web-batch", "i1", "n2", 1000.0)]
    avoided = avoided_nodes(history, "web-batch", 1240.0, config)
    assert avoided["n2"].explain() == "evicted web-batch 4 min ago, back-off 10 min"
    assert avoided_nodes(history, "web-batch", 1600.0, config) == {}  # 10 min later the node takes it again
    assert avoided_nodes(history, "other", 1240.0, config) == {}  # only the evicted workload avoids it
    twice = [*history, Eviction("web-batch", "i2", "n2", 1500.0)]
    assert avoided_nodes(twice, "web-batch", 2600.0, config)["n2"].backoff == 1200.0
    assert avoided_nodes(twice, "web-batch", 1500.0 + 3600.0, config) == {}  # decayed: both outside the hour


def test_replacement_delay_is_30s_times_2_to_the_k_capped_and_gives_up_at_the_maximum() -> None:
    config = KeepConfig()
    assert replacement_delay([100.0], 100.0, config) == 60.0
    assert replacement_delay([10.0, 50.0, 100.0], 100.0, config) == 240.0
    assert replacement_delay([float(t) for t in range(10)], 10.0, config) == 900.0  # capped
    assert replacement_delay([0.0, 5000.0], 5000.0, config) == 60.0  # the first eviction left the hour
    assert not gives_up([1.0] * 9, config)
    assert gives_up([1.0] * 10, config)
    with pytest.raises(InvalidInput) as caught:
        parse_keep_config({"avoid_seconds": -1}, "allocator.keep")
    assert caught.value.field == "allocator.keep.avoid_seconds"


# -- peak-sized room -------------------------------------------------------------------------------------------------


def test_room_comes_from_the_peak_over_the_horizon_not_the_trough() -> None:
    peaks = PeakWindow(1800.0)
    for t in range(0, 3600, 5):
        usage = 26 if (t // 900) % 2 else 14  # 15 minutes at 14 cores, 15 at 26 …
        peaks.add(float(t), usage)
    assert peaks.peak == 26  # in a trough, the last 30 minutes still hold a peak
    assert peaks.covered_seconds == 1800.0
    assert peak_room(32, 75, 20, 4) == 8  # 32 − 20 − 4
    assert peak_room(32, 75, 24, 0) == 0  # a peak at the evict watermark: batch there would be evicted


def test_the_tracker_publishes_room_horizon_and_peak() -> None:
    from test_tracker import sample

    from eru.colocation.config import ColocationConfig
    from eru.colocation.tracker import NodeTracker

    tracker = NodeTracker("n1", ColocationConfig(room_horizon_seconds=60.0), condition_refresh_seconds=1)
    for step in range(20):
        tracker.observe(sample(100.0 + 5 * step, node_cpu=2.0 if step < 10 else 20.0, batch={}), 100.0 + 5 * step)
    condition = tracker.last_condition
    assert condition is not None
    assert condition.room_horizon_seconds == 60.0
    assert condition.ls_cpu_peak == pytest.approx(20.0)
    assert condition.room_cpu == pytest.approx(12.0)  # 32 − 20 (no batch)
    assert condition.batch_cpu_capacity <= 12.0


# -- victims: progress, budgets, refusals replay ----------------------------------------------------------------------


def _with_workloads(p: dict[str, Any], work: dict[str, float]) -> dict[str, Any]:
    out = copy.deepcopy(p)
    for container in out["containers"]:
        if container["class"] == "batch":
            container["workload"] = "w"
            container["priority"] = 1
            container["work"] = work[container["id"]]
    return out


def test_among_equal_candidates_the_one_with_least_work_goes() -> None:
    # b1 and b3 both request 4 cores at priority 1 (equal candidates); b3 has done less work
    p = _with_workloads(problem(), {"b1": 900.0, "b2": 10.0, "b3": 300.0})
    victims = [v["id"] for v in solve_evict(p)["evict"]]
    assert victims[0] == "b3"
    off = copy.deepcopy(p)
    off["config"]["prefer_least_work"] = False
    assert next(v["id"] for v in solve_evict(off)["evict"]) == "b1"  # by id once progress is ignored


def test_a_spent_budget_refuses_the_cpu_eviction_and_the_refusal_replays() -> None:
    p = _with_workloads(problem(), {"b1": 1.0, "b2": 2.0, "b3": 3.0})
    p["budgets"] = [{"workload": "w", "max_unavailable": 1, "window_seconds": 600, "desired": 3, "evictions": [990.0]}]
    answer = solve_evict(p)
    assert answer["evict"] == []
    assert {r["id"] for r in answer["refused"]} >= {"b1"}
    assert answer["explain"]["budget"]["rule"] == "budget"
    assert "only suppressed" in answer["explain"]["action"]
    recorded = RecordedDecision(
        "d1", "evict", p, {"evict": [], "refused": [{"id": r["id"], "rule": r["rule"]} for r in answer["refused"]]}
    )
    assert replay(recorded).same
    tampered = RecordedDecision("d1", "evict", p, {"evict": [], "refused": []})
    assert not replay(tampered).same


def test_with_budget_left_the_victim_carries_its_eviction_count_and_the_budget_left() -> None:
    p = _with_workloads(problem(), {"b1": 1.0, "b2": 2.0, "b3": 3.0})
    p["containers"][2]["evictions"] = 2
    p["budgets"] = [{"workload": "w", "max_unavailable": "100%", "window_seconds": 600, "desired": 3, "evictions": []}]
    victims = solve_evict(p)["evict"]
    assert victims
    assert all("budget_left" in v for v in victims)
    first = victims[0]
    assert first["budget_left"] == 2
    assert first["evictions"] == (2 if first["id"] == "b1" else 0)


def test_memory_over_the_critical_line_beats_the_budget() -> None:
    def hot(t: float) -> dict[str, Any]:
        from coloc_builders import sample

        return sample(t, node_memory=60 * GIB)  # 94 % of 64 GiB: over memory_evict and memory_critical (90)

    p = _with_workloads(problem(newest=hot), {"b1": 1.0, "b2": 2.0, "b3": 3.0})
    p["budgets"] = [{"workload": "w", "max_unavailable": 0, "window_seconds": 600, "desired": 3, "evictions": []}]
    answer = solve_evict(p)
    assert any(v["reason"] == "memory" for v in answer["evict"])
    assert answer["explain"]["budget"]["rule"] == "out-of-memory"


# -- eviction memory in a deploy decision ----------------------------------------------------------------------------


def test_a_deploy_problem_with_an_eviction_history_avoids_the_node_and_says_why() -> None:
    nodes = [{"name": n, "cpu_map": {"0": 100, "1": 100}, "memory": 4 * GIB} for n in ("n1", "n2")]
    base = {"kind": "deploy", "mode": "auto", "count": 2, "request": {"cpu_request": 1}, "nodes": nodes}
    assert solve(base)["deploy"] == {"n1": 1, "n2": 1}
    with_memory = {
        **base,
        "workload": "web-batch",
        "now": 1240.0,
        "evictions": [{"workload": "web-batch", "instance": "c1", "node": "n2", "time": 1000.0}],
    }
    answer = solve(with_memory)
    assert answer["deploy"] == {"n1": 2}
    assert answer["avoided"] == {"n2": "evicted web-batch 4 min ago, back-off 10 min"}
    with pytest.raises(InvalidInput) as caught:
        solve({**with_memory, "evictions": [{"workload": "web-batch", "node": "n2", "time": "soon"}]})
    assert caught.value.field == "evictions[0].time"


def test_node_ls_shows_room_peak_and_horizon() -> None:
    from eru.cli.node_commands import room_text

    condition = {"room_cpu": 6.0, "ls_cpu_peak": 20.5, "room_horizon_seconds": 3600, "room_covered_seconds": 3600}
    assert room_text(condition) == "6 cores (LS peak 20.5 cores over 60 min)"
    assert room_text({**condition, "room_covered_seconds": 600}) == "6 cores (LS peak 20.5 cores over 10 of 60 min)"
    assert room_text({"state": "normal"}) == "-"


def test_eru_deploy_keep_and_max_unavailable_build_the_request() -> None:
    from eru.cli.deploy_commands import _request

    fields: dict[str, Any] = {
        "pod": "p1",
        "image": "busybox",
        "name": "crunch",
        "count": 4,
        "cpu": 1.0,
        "cpu_limit": 0.0,
        "cpu_bind": False,
        "memory": "0",
        "memory_limit": "0",
        "mode": "auto",
        "nodes_limit": 0,
        "priority_class": "batch",
        "tenant": "default",
        "command": None,
        "request_id": None,
        "wait_seconds": 0.0,
    }
    request = _request(**fields, keep=True, max_unavailable="25%")
    assert request.keep
    assert request.workload.eviction_budget == {"max_unavailable": "25%"}
    assert _request(**fields, keep=False, max_unavailable="3").workload.eviction_budget == {"max_unavailable": 3}


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        # a service is kept at its count too (its instances lost with a down node are placed again)
        ({"keep": True, "workload": {"name": "w", "image": "x"}}, None),
        (
            {"workload": {"name": "w", "image": "x", "eviction_budget": {"max_unavailable": 1}}},
            "workload.eviction_budget",
        ),
        (
            {
                "workload": {
                    "name": "w",
                    "image": "x",
                    "priority_class": "batch",
                    "eviction_budget": {"max_unavailable": "9"},
                }
            },
            None,
        ),
        (
            {"workload": {"name": "w", "image": "x", "priority_class": "batch", "eviction_budget": {"window": 5}}},
            "workload.eviction_budget.window",
        ),
    ],
)
def test_the_allocator_checks_keep_and_budgets_at_deploy_naming_the_field(
    fields: dict[str, Any], field: str | None
) -> None:
    from eru.domain import DeployRequest
    from eru_allocator.containers.keep_count import check_keep

    request = DeployRequest.model_validate({"pod": "p1", **fields})
    batch = request.workload.priority_class == "batch"
    if field is None:
        check_keep(request, batch)
        return
    with pytest.raises(InvalidInput) as caught:
        check_keep(request, batch)
    assert caught.value.field == field
