"""Memory eviction in real time, CPU suppression and forbid-schedule with hysteresis (docs/colocation.md)."""

from __future__ import annotations

from typing import Any

import pytest
from coloc_builders import GIB, NOW, problem, sample

from eru.colocation.plan_kind import solve_evict

QUIET: dict[str, Any] = {"node_cpu": 10.0, "allowed": None, "batch": (0.5, 0.5, 0.5)}


def quiet(t: float, **changes: Any) -> dict[str, Any]:
    return sample(t, **(QUIET | changes))


def test_memory_eviction_at_the_watermark_releases_down_to_two_points_below() -> None:
    # 64 GiB node, evict at 70 %: 44.8 GiB used is exactly 70 % → release 44.8 - 64 × 68 % = 1.28 GiB.
    used = -(-64 * GIB * 70 // 100)  # the first byte count at or above 70 %
    answer = solve_evict(problem(count=1, every=lambda t: quiet(t, node_memory=used)))
    assert answer["explain"]["memory"]["release_bytes"] == used - 64 * GIB * 68 // 100
    # Priority 1 first, largest memory usage first: b1 (3 GiB) frees enough alone.
    assert [(v["id"], v["reason"], v["release"]) for v in answer["evict"]] == [("b1", "memory", 3 * GIB)]


def test_memory_just_below_the_watermark_is_left_alone() -> None:
    used = -(-64 * GIB * 70 // 100) - 1
    answer = solve_evict(problem(count=1, every=lambda t: quiet(t, node_memory=used)))
    assert answer["evict"] == []
    assert answer["explain"]["memory"]["at_or_above_watermark"] is False


def test_memory_eviction_needs_no_window_and_orders_by_priority_then_usage() -> None:
    used = 60 * GIB  # 93.75 %: release 60 - 43.52 = 16.48 GiB, more than all batch uses: all of them go
    answer = solve_evict(
        problem(count=1, every=lambda t: quiet(t, node_memory=used, batch_memory=(1 * GIB, 2 * GIB, 5 * GIB)))
    )
    assert [v["id"] for v in answer["evict"]] == ["b2", "b1", "b3"]


def test_memory_cool_down() -> None:
    used = 50 * GIB
    assert solve_evict(problem(count=1, every=lambda t: quiet(t, node_memory=used), last_memory_eviction=NOW - 4))[
        "evict"
    ]
    cooling = solve_evict(problem(count=1, every=lambda t: quiet(t, node_memory=used), last_memory_eviction=NOW - 3.9))
    assert cooling["evict"] == []


def test_memory_eviction_ignores_a_stale_sample() -> None:
    answer = solve_evict(problem(count=1, every=lambda t: quiet(t, node_memory=60 * GIB), newest_age=10.5))
    assert answer["evict"] == []


def test_memory_and_cpu_victims_are_not_doubled() -> None:
    # CPU pressure evicts b1+b2 (release 5); memory pressure at the same time takes b1 first (largest usage).
    answer = solve_evict(problem(every=lambda t: sample(t, node_memory=46 * GIB)))
    ids = [v["id"] for v in answer["evict"]]
    assert len(ids) == len(set(ids))
    assert ids[0] == "b1"
    assert answer["evict"][0]["reason"] == "memory"
    # b1's 4 requested cores count toward the CPU release of 5: one more core from b2.
    assert ids == ["b1", "b2"]


def test_suppression_starts_at_the_watermark_and_cuts_at_once() -> None:
    # 65 % of 32 = 20.8 cores; non-batch usage 20.8 - 1.5 = 19.3 → allowed 1.5
    at = solve_evict(problem(count=1, every=lambda t: quiet(t, node_cpu=20.8)))
    assert at["suppress"] == {"batch_cpu_allowed": pytest.approx(1.5)}
    below = solve_evict(problem(count=1, every=lambda t: quiet(t, node_cpu=20.799999)))
    assert below["suppress"] is None


def test_suppression_is_raised_by_at_most_ten_percent_of_capacity_per_step() -> None:
    # Previously allowed 1 core; the node now leaves 10.8 cores for batch, batch uses all of its allowance.
    answer = solve_evict(problem(count=1, every=lambda t: quiet(t, node_cpu=11.0, allowed=1.0, batch=(0.4, 0.3, 0.3))))
    assert answer["explain"]["suppress"]["target"] == pytest.approx(20.8 - 10.0)
    assert answer["suppress"] == {"batch_cpu_allowed": pytest.approx(1.0 + 3.2)}


def test_suppression_is_lowered_at_once() -> None:
    answer = solve_evict(problem(count=1, every=lambda t: quiet(t, node_cpu=26.0, allowed=8.0, batch=(2.0, 2.0, 2.0))))
    # non-batch 20 → target 0.8, far below 8: cut immediately.
    assert answer["suppress"] == {"batch_cpu_allowed": pytest.approx(0.8)}


def test_suppression_is_lifted_when_batch_uses_well_below_its_allowance() -> None:
    answer = solve_evict(problem(count=1, every=lambda t: quiet(t, node_cpu=12.0, allowed=8.0, batch=(0.5, 0.5, 0.5))))
    assert answer["suppress"] is None


def test_prod_and_mid_usage_is_never_suppressed_only_batch_allowance() -> None:
    answer = solve_evict(problem(count=1, every=lambda t: quiet(t, node_cpu=31.0)))
    assert answer["suppress"]["batch_cpu_allowed"] == 0.0  # non-batch uses more than 65 %: batch gets nothing
    assert answer["evict"] == []  # and no window yet, so no CPU eviction


def test_forbid_schedule_sets_at_the_watermark_and_clears_with_hysteresis() -> None:
    at = solve_evict(problem(count=1, every=lambda t: quiet(t, node_cpu=20.8)))
    assert at["forbid_schedule"]["cpu"] is True
    # Still forbidden a little below the watermark (hysteresis 5 points: clears below 60 % = 19.2 cores) …
    held = solve_evict(problem(count=1, every=lambda t: quiet(t, node_cpu=19.2), forbid_schedule={"cpu": True}))
    assert held["forbid_schedule"]["cpu"] is True
    # … but a node that was not forbidden is not forbidden at 60 %.
    fresh = solve_evict(problem(count=1, every=lambda t: quiet(t, node_cpu=19.2)))
    assert fresh["forbid_schedule"]["cpu"] is False
    cleared = solve_evict(problem(count=1, every=lambda t: quiet(t, node_cpu=19.199999), forbid_schedule={"cpu": True}))
    assert cleared["forbid_schedule"]["cpu"] is False


def test_memory_forbid_schedule() -> None:
    used = -(-64 * GIB * 65 // 100)
    assert solve_evict(problem(count=1, every=lambda t: quiet(t, node_memory=used)))["forbid_schedule"]["memory"]
    assert not solve_evict(problem(count=1, every=lambda t: quiet(t, node_memory=used - 1)))["forbid_schedule"][
        "memory"
    ]


def test_stale_sample_keeps_the_forbid_flags() -> None:
    answer = solve_evict(problem(count=1, every=lambda t: quiet(t), newest_age=11, forbid_schedule={"cpu": True}))
    assert answer["forbid_schedule"] == {"cpu": True, "memory": False}
