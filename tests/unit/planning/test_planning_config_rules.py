"""Every validity rule docs/planning.md states for `PlanningConfig` and the `score` options, one test per rule: the
edge is accepted, one step past it is refused with an error naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from eru.errors import InvalidInput
from eru.planning.request import config_from_mapping
from eru.planning.scorers.options import build_state, parse_scorers


def _refused(raw: dict[str, Any]) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        config_from_mapping(raw)
    return caught.value


def test_share_base_within_1_to_a_million() -> None:
    assert config_from_mapping({"share_base": 1}).share_base == 1
    assert config_from_mapping({"share_base": 1_000_000}).share_base == 1_000_000
    for bad in (0, 1_000_001):
        assert _refused({"share_base": bad}).field == "config.share_base"
    assert "integer" in _refused({"share_base": 1.5}).message


def test_max_fragment_cores_at_least_minus_one() -> None:
    assert config_from_mapping({"max_fragment_cores": -1}).fragment_cap is None
    assert config_from_mapping({"max_fragment_cores": 0}).fragment_cap == 0
    error = _refused({"max_fragment_cores": -2})
    assert error.field == "config.max_fragment_cores"
    assert "-1..1000000000" in error.message


def test_max_deploy_count_at_least_zero() -> None:
    assert config_from_mapping({"max_deploy_count": 0}).max_deploy_count == 0
    error = _refused({"max_deploy_count": -1})
    assert error.field == "config.max_deploy_count"


def test_integers_only() -> None:
    for key in ("share_base", "max_fragment_cores", "max_deploy_count"):
        error = _refused({key: True})
        assert error.field == f"config.{key}"
        assert "integer" in error.message


def test_no_unknown_keys() -> None:
    error = _refused({"share_bsae": 100})
    assert error.field == "config.share_bsae"
    assert "unknown field" in error.message


def test_scorer_weights_finite_and_not_negative() -> None:
    assert [name for name, _, _ in parse_scorers({"scorers": {"least-allocated": 0, "most-allocated": 1}})] == [
        "most-allocated"
    ]
    for bad in (-1, float("inf"), "1", True):
        with pytest.raises(InvalidInput) as caught:
            parse_scorers({"scorers": {"least-allocated": bad}})
        assert caught.value.field == "options.scorers.least-allocated"


def test_at_least_one_scorer_weight_above_zero() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_scorers({"scorers": {"least-allocated": 0}})
    assert caught.value.field == "options.scorers"
    assert "at least one" in caught.value.message


def test_scorers_must_be_registered() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_scorers({"scorers": {"fewest-pods": 1}})
    assert caught.value.field == "options.scorers.fewest-pods"


def _build(options: dict[str, Any]) -> None:
    build_state(("n1",), lambda: [0.0], lambda: [0.0], options)


def test_amounts_are_integers_within_0_to_2_pow_53() -> None:
    nodes = {"n1": {"allocatable": {"cpu": 2**53}}}
    _build({"request": {"cpu": 0}, "nodes": nodes})
    for bad in (-1, 2**53 + 1, 1.5):
        with pytest.raises(InvalidInput) as caught:
            _build({"request": {"cpu": bad}, "nodes": nodes})
        assert caught.value.field == "options.request.cpu"


def test_resource_weights_only_for_scored_resources() -> None:
    with pytest.raises(InvalidInput) as caught:
        _build({"request": {"cpu": 1}, "nodes": {"n1": {"allocatable": {"cpu": 4}}}, "resource_weights": {"gpu": 1}})
    assert caught.value.field == "options.resource_weights.gpu"


def test_no_unknown_score_options() -> None:
    with pytest.raises(InvalidInput) as caught:
        _build({"scorer": {}})
    assert caught.value.field == "options"
    assert "unknown score options" in caught.value.message
