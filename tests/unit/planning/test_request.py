"""Request normalisation (docs/planning.md): the rules in order, exact pieces, errors that name the field."""

from __future__ import annotations

import pytest

from eru.domain.resources import ResourceRequest
from eru.errors import InvalidInput
from eru.planning import NormalizedRequest, PlanningConfig, config_from_mapping, normalize_request

CONFIG = PlanningConfig()


def test_pieces_are_exact() -> None:
    assert normalize_request({"cpu_request": 0.29}, CONFIG).cpu_request == 29
    assert normalize_request({"cpu_request": "1.7"}, CONFIG).cpu_request == 170
    assert normalize_request({"cpu_request": 0.001}, PlanningConfig(share_base=1000)).cpu_request == 1


def test_inexact_pieces_are_an_error_that_says_so() -> None:
    with pytest.raises(InvalidInput) as error:
        normalize_request({"cpu_request": 0.333}, CONFIG)
    assert error.value.field == "request.cpu_request"
    assert "not a whole number of pieces" in error.value.message


def test_cpu_bind_below_one_piece_is_an_error() -> None:
    with pytest.raises(InvalidInput) as error:
        normalize_request({"cpu_bind": True, "cpu_request": 0.001}, CONFIG)
    assert error.value.field == "request.cpu_request"
    with pytest.raises(InvalidInput, match="cpu_bind needs"):
        normalize_request({"cpu_bind": True}, CONFIG)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"cpu_limit": 2}, NormalizedRequest(False, 200, 200, 0, 0)),
        ({"memory_limit": "1GiB"}, NormalizedRequest(False, 0, 0, 1 << 30, 1 << 30)),
        ({"cpu_request": 2, "cpu_limit": 1}, NormalizedRequest(False, 200, 200, 0, 0)),
        ({"memory_request": "2G", "memory_limit": "1G"}, NormalizedRequest(False, 0, 0, 2 * 10**9, 2 * 10**9)),
        ({"cpu_bind": True, "cpu_request": 1, "cpu_limit": 1.5}, NormalizedRequest(True, 150, 150, 0, 0)),
        ({"cpu_request": 1, "cpu_limit": 0}, NormalizedRequest(False, 100, 0, 0, 0)),
        ({"cpu_request": 1, "memory_soft": True}, NormalizedRequest(False, 100, 0, 0, 0, True)),
    ],
)
def test_rules(raw: dict[str, object], expected: NormalizedRequest) -> None:
    assert normalize_request(raw, CONFIG) == expected


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"memory_request": -1}, "request.memory_request"),
        ({"cpu_request": -1}, "request.cpu_request"),
        ({"cpu_limit": -0.5, "cpu_request": 1}, "request.cpu_limit"),
        ({"cpu_bind": "yes"}, "request.cpu_bind"),
        ({"memory_request": "12 parsecs"}, "request.memory_request"),
        ({"cpu_request": 1e300}, "request.cpu_request"),
        ({"cpus": 1}, "request.cpus"),
    ],
)
def test_errors_name_the_field(raw: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as error:
        normalize_request(raw, CONFIG)
    assert error.value.field == field


def test_pydantic_request_is_accepted() -> None:
    request = ResourceRequest(cpu_bind=True, cpu_request=1.5, memory_request="1GiB")
    assert normalize_request(request, CONFIG) == NormalizedRequest(True, 150, 0, 1 << 30, 0)


def test_config_errors_name_the_field() -> None:
    with pytest.raises(InvalidInput) as error:
        config_from_mapping({"share_base": 0})
    assert error.value.field == "config.share_base"
    with pytest.raises(InvalidInput) as error:
        config_from_mapping({"max_fragment_cores": -2})
    assert error.value.field == "config.max_fragment_cores"
    with pytest.raises(InvalidInput) as error:
        config_from_mapping({"shares": 1})
    assert error.value.field == "config.shares"
