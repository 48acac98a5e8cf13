"""Every validity rule docs/colocation.md states ("Watermarks"), one test per rule: the rule's edge is accepted, one
step over it is refused with an error naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from coloc_builders import CONFIG

from eru.colocation.config import PERCENT_FIELDS, SECONDS_FIELDS, parse_config, resolve_config
from eru.errors import InvalidInput


def _refused(changes: dict[str, Any]) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        parse_config(CONFIG | changes)
    return caught.value


def test_cpu_evict_at_least_cpu_suppress() -> None:
    assert parse_config(CONFIG | {"cpu_evict": 65, "cpu_suppress": 65}).cpu_evict == 65
    error = _refused({"cpu_evict": 64, "cpu_suppress": 65, "cpu_forbid": 60})
    assert error.field == "config.cpu_suppress"
    assert "cpu_evict (64) must be at least cpu_suppress (65)" in error.message


def test_cpu_suppress_at_least_cpu_forbid() -> None:
    assert parse_config(CONFIG | {"cpu_forbid": 65}).cpu_forbid == 65
    error = _refused({"cpu_forbid": 66})
    assert error.field == "config.cpu_forbid"
    assert "cpu_suppress (65) must be at least cpu_forbid (66)" in error.message


def test_memory_evict_at_least_memory_forbid() -> None:
    assert parse_config(CONFIG | {"memory_forbid": 70}).memory_forbid == 70
    error = _refused({"memory_forbid": 71})
    assert error.field == "config.memory_forbid"
    assert "memory_evict (70)" in error.message


def test_satisfaction_upper_at_least_lower() -> None:
    assert parse_config(CONFIG | {"satisfaction_lower": 80}).satisfaction_lower == 80
    error = _refused({"satisfaction_lower": 81})
    assert error.field == "config.satisfaction_lower"
    assert "at least satisfaction_lower (81)" in error.message


def test_satisfaction_lower_above_zero() -> None:
    # the defect: lower 0 was accepted and switched CPU eviction off (satisfaction < 0 never holds)
    assert parse_config(CONFIG | {"satisfaction_lower": 1}).satisfaction_lower == 1
    error = _refused({"satisfaction_lower": 0})
    assert error.field == "config.satisfaction_lower"
    assert "must be above 0" in error.message


def test_satisfaction_lower_zero_in_a_node_layer_names_the_node() -> None:
    with pytest.raises(InvalidInput) as caught:
        resolve_config(("pods.web", CONFIG), ("nodes.n1", {"satisfaction_lower": 0}))
    assert caught.value.field == "nodes.n1.satisfaction_lower"


def test_satisfaction_upper_above_zero() -> None:
    error = _refused({"satisfaction_lower": 0, "satisfaction_upper": 0})
    assert error.field in ("config.satisfaction_lower", "config.satisfaction_upper")
    assert "must be above 0" in error.message


def test_suppress_step_percent_above_zero() -> None:
    assert parse_config(CONFIG | {"suppress_step_percent": 1}).suppress_step_percent == 1
    error = _refused({"suppress_step_percent": 0})
    assert error.field == "config.suppress_step_percent"
    assert "must be above 0" in error.message


@pytest.mark.parametrize("field", PERCENT_FIELDS)
def test_percentages_are_integers_within_0_to_100(field: str) -> None:
    assert getattr(parse_config(CONFIG | dict.fromkeys(PERCENT_FIELDS, 100)), field) == 100
    for bad, words in ((101, "within 0..100"), (-1, "within 0..100"), (50.5, "integer percentage"), ("50", "integer")):
        error = _refused({field: bad})
        assert error.field == f"config.{field}"
        assert words in error.message


@pytest.mark.parametrize(
    "field",
    ["window_seconds", "metrics_interval_seconds", "reservation_half_life_seconds", "reservation_peak_window_seconds"],
)
def test_windows_and_intervals_above_zero(field: str) -> None:
    assert getattr(parse_config(CONFIG | {field: 0.5}), field) == 0.5
    error = _refused({field: 0})
    assert error.field == f"config.{field}"
    assert "greater than 0" in error.message


@pytest.mark.parametrize("field", ["cpu_cooldown_seconds", "memory_cooldown_seconds", "reservation_startup_seconds"])
def test_cooldowns_at_least_zero(field: str) -> None:
    assert getattr(parse_config(CONFIG | {field: 0}), field) == 0
    error = _refused({field: -0.5})
    assert error.field == f"config.{field}"
    assert "negative" in error.message


@pytest.mark.parametrize("field", SECONDS_FIELDS)
def test_seconds_are_finite_numbers(field: str) -> None:
    for bad in ("5s", True, float("inf"), float("nan")):
        assert _refused({field: bad}).field == f"config.{field}"


def test_no_unknown_keys() -> None:
    error = _refused({"cpu_evcit": 80})
    assert error.field == "config.cpu_evcit"
    assert "unknown setting" in error.message
