"""CPU eviction by satisfaction rate (docs/colocation.md): every condition's boundary, release, victims, cool-down,
staleness."""

from __future__ import annotations

from typing import Any

import pytest
from coloc_builders import NOW, problem, sample

from eru.colocation.plan_kind import solve_evict


def evicted(answer: dict[str, Any]) -> list[str]:
    return [v["id"] for v in answer["evict"]]


def test_all_conditions_true_evicts_lowest_priority_until_release() -> None:
    answer = solve_evict(problem())
    # request 10, allowed 4, upper 80% → release 10 - 4/0.8 = 5 cores: b1 (4) then b2 (2); b3 (priority 2) stays.
    assert answer["explain"]["cpu"]["release_cores"] == pytest.approx(5.0)
    assert evicted(answer) == ["b1", "b2"]
    assert [v["release"] for v in answer["evict"]] == [pytest.approx(4.0), pytest.approx(2.0)]
    assert {v["reason"] for v in answer["evict"]} == {"cpu-satisfaction"}
    assert all(answer["explain"]["cpu"]["conditions"].values())


def test_window_node_cpu_exactly_at_evict_watermark_counts_and_just_below_does_not() -> None:
    # 24 of 32 cores is exactly 75 %.
    at = problem(every=lambda t: sample(t, node_cpu=24.0))
    below = problem(every=lambda t: sample(t, node_cpu=23.999999))
    assert evicted(solve_evict(at)) == ["b1", "b2"]
    answer = solve_evict(below)
    assert evicted(answer) == []
    assert answer["explain"]["cpu"]["conditions"]["window_node_cpu_at_or_above_evict"] is False


def test_window_average_decides_not_the_newest_node_cpu() -> None:
    # Every sample below the watermark except the newest one far above it: the window average is still below.
    answer = solve_evict(problem(every=lambda t: sample(t, node_cpu=23.0), newest=lambda t: sample(t, node_cpu=32.0)))
    assert evicted(answer) == []
    assert answer["explain"]["cpu"]["window_node_cpu_percent"] < 75


def test_window_satisfaction_exactly_at_lower_bound_is_not_below() -> None:
    # allowed 6 → util 100 %; batch used 6 of 10 requested = 60 % = the lower bound: not below, no eviction.
    at = problem(every=lambda t: sample(t, allowed=6.0, batch=(2.0, 2.0, 2.0)))
    answer = solve_evict(at)
    assert answer["explain"]["cpu"]["conditions"]["window_satisfaction_below_lower"] is False
    assert evicted(answer) == []
    just_below = problem(every=lambda t: sample(t, allowed=6.0, batch=(2.0, 2.0, 1.999999)))
    assert evicted(solve_evict(just_below)) != []


def test_window_satisfaction_high_but_newest_low_does_not_evict() -> None:
    answer = solve_evict(
        problem(
            every=lambda t: sample(t, allowed=8.0, batch=(3.0, 2.0, 2.5)),  # 75 % satisfied, 94 % utilised
            newest=lambda t: sample(t, allowed=4.0),
        )
    )
    conditions = answer["explain"]["cpu"]["conditions"]
    assert conditions["window_satisfaction_below_lower"] is False
    assert conditions["newest_satisfaction_below_lower"] is True
    assert evicted(answer) == []


def test_newest_satisfaction_at_lower_bound_does_not_evict() -> None:
    answer = solve_evict(problem(newest=lambda t: sample(t, allowed=6.0, batch=(2.0, 2.0, 2.0))))
    conditions = answer["explain"]["cpu"]["conditions"]
    assert conditions["window_satisfaction_below_lower"] is True
    assert conditions["newest_satisfaction_below_lower"] is False
    assert evicted(answer) == []


def test_batch_utilisation_exactly_at_threshold_counts() -> None:
    # used 3.6 of allowed 4 = 90 % exactly.
    at = problem(every=lambda t: sample(t, batch=(1.5, 0.6, 1.5)))
    answer = solve_evict(at)
    assert answer["explain"]["cpu"]["conditions"]["window_batch_util_at_or_above_threshold"] is True
    assert evicted(answer) == ["b1", "b2"]


def test_window_batch_utilisation_below_threshold_does_not_evict() -> None:
    # 59 samples at 3.5 of 4 allowed (87.5 %) and the newest at 3.8 (95 %): the window stays below 90 %.
    answer = solve_evict(problem(every=lambda t: sample(t, batch=(1.5, 0.5, 1.5)), newest=lambda t: sample(t)))
    conditions = answer["explain"]["cpu"]["conditions"]
    assert conditions["window_batch_util_at_or_above_threshold"] is False
    assert conditions["newest_batch_util_at_or_above_threshold"] is True
    assert evicted(answer) == []


def test_newest_batch_utilisation_below_threshold_does_not_evict() -> None:
    answer = solve_evict(problem(newest=lambda t: sample(t, batch=(1.0, 0.5, 1.0))))
    conditions = answer["explain"]["cpu"]["conditions"]
    assert conditions["window_batch_util_at_or_above_threshold"] is True
    assert conditions["newest_batch_util_at_or_above_threshold"] is False
    assert evicted(answer) == []


def test_window_needs_a_third_of_the_expected_samples() -> None:
    # 300 s window / 5 s interval = 60 expected samples: 20 count, 19 do not.
    assert evicted(solve_evict(problem(count=20))) == ["b1", "b2"]
    answer = solve_evict(problem(count=19))
    assert answer["explain"]["cpu"]["conditions"]["window_covered"] is False
    assert evicted(answer) == []


def test_samples_at_or_before_the_window_start_do_not_count() -> None:
    # 121 samples over 600 s: those at or before now - 300 are far above the watermark, those inside are below it.
    answer = solve_evict(problem(count=121, every=lambda t: sample(t, node_cpu=32.0 if t <= NOW - 300 else 23.0)))
    assert answer["explain"]["window"]["samples"] == 60
    assert answer["explain"]["cpu"]["window_node_cpu_percent"] == pytest.approx(23 / 32 * 100, abs=1e-3)
    assert evicted(answer) == []


def test_stale_newest_sample_means_no_action() -> None:
    fresh = problem(newest_age=10.0)  # exactly two intervals old: still usable
    assert evicted(solve_evict(fresh)) == ["b1", "b2"]
    stale = problem(newest_age=10.001)
    answer = solve_evict(stale)
    assert answer["evict"] == []
    assert answer["explain"]["action"].startswith("none: newest sample")
    assert answer["suppress"] == {"batch_cpu_allowed": 4.0}  # the suppression in force is kept, not changed


def test_no_samples_means_no_action() -> None:
    answer = solve_evict(problem(count=0))
    assert answer == answer | {"evict": [], "suppress": None, "forbid_schedule": {"cpu": False, "memory": False}}


def test_cool_down_after_a_cpu_eviction_round() -> None:
    assert evicted(solve_evict(problem(last_cpu_eviction=NOW - 20.0))) == ["b1", "b2"]
    answer = solve_evict(problem(last_cpu_eviction=NOW - 19.999))
    assert answer["evict"] == []
    assert answer["explain"]["cpu"]["cooling_down"] is True


def test_equal_priority_prefers_the_container_that_frees_more() -> None:
    p = problem()
    # Release 5: at priority 1, b1 (4 cores) goes before b2 (2 cores) even though b2 is listed first.
    p["containers"] = [p["containers"][i] for i in (0, 1, 3, 2, 4)]
    assert evicted(solve_evict(p)) == ["b1", "b2"]


def test_fewest_victims_spares_a_low_priority_container_that_a_bigger_one_covers() -> None:
    p = problem()
    for c in p["containers"]:
        if c["id"] == "b1":
            c["cpu_request"] = 0.5  # priority 1
        if c["id"] == "b2":
            c["cpu_request"] = 0.5  # priority 1
        if c["id"] == "b3":
            c["cpu_request"] = 9  # priority 2
    # request 10, allowed 4 → release 5: b1 + b2 free 1, so b3 must go, and alone it frees enough.
    assert evicted(solve_evict(p)) == ["b3"]


def test_release_is_request_minus_allowed_over_upper() -> None:
    p = problem(every=lambda t: sample(t, allowed=2.0, batch=(0.8, 0.4, 0.8)))
    answer = solve_evict(p)
    assert answer["explain"]["cpu"]["release_cores"] == pytest.approx(10 - 2.0 / 0.8)
    # 7.5 cores: b1 (4) + b2 (2) = 6 is short, b3 (4) joins → 10; then b2 is spared (8 ≥ 7.5).
    assert evicted(answer) == ["b1", "b3"]


def test_prod_and_mid_are_never_victims_even_when_batch_cannot_free_enough() -> None:
    p = problem(every=lambda t: sample(t, allowed=0.5, batch=(0.2, 0.1, 0.2)))
    answer = solve_evict(p)
    assert sorted(evicted(answer)) == ["b1", "b2", "b3"]


def test_container_missing_from_the_registry_is_never_acted_on() -> None:
    p = problem(every=lambda t: sample(t, allowed=2.5))
    p["containers"] = [c for c in p["containers"] if c["id"] != "b1"]
    answer = solve_evict(p)
    # Without b1: request 6, usage 2.3 of 2.5 allowed → release 6 - 2.5/0.8 = 2.875: b2 (2) is short, b3 (4) covers
    # it alone, so b2 is spared.
    assert answer["explain"]["newest"]["batch_cpu_request"] == pytest.approx(6.0)
    assert evicted(answer) == ["b3"]


def test_pending_evictions_are_not_chosen_again_and_count_toward_the_release() -> None:
    answer = solve_evict(problem(pending_evictions=["b1"]))
    # release 5, b1's 4 cores already on their way: 1 more core is needed → b2.
    assert evicted(answer) == ["b2"]


def test_no_batch_no_eviction() -> None:
    p = problem()
    p["containers"] = [c for c in p["containers"] if c["class"] != "batch"]
    answer = solve_evict(p)
    assert answer["evict"] == []
    assert answer["suppress"] is None
