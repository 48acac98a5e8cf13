"""Every validity rule docs/fairness-and-scoring.md states for tenant settings, one test per rule: the edge is
accepted, one step past it is refused with an error naming the field."""

from __future__ import annotations

from fractions import Fraction

import pytest

from eru.errors import InvalidInput
from eru.fairness.tenant_config import tenant_from_fields


def _refused(name: str = "t", weight: object = 1, quota: object = None, limit: object = None) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        tenant_from_fields(name, weight, quota, limit)
    return caught.value


def test_weight_above_zero() -> None:
    assert tenant_from_fields("t", "0.001", None, None).weight == Fraction(1, 1000)
    error = _refused(weight=0)
    assert error.field == "weight"
    assert "must be > 0" in error.message


def test_only_cpu_and_memory() -> None:
    assert tenant_from_fields("t", 1, {"cpu": 1, "memory": 1}, None).quota == {"cpu": 1, "memory": 1}
    assert _refused(quota={"gpu": 1}).field == "quota.gpu"
    assert _refused(limit={"disk": 1}).field == "limit.disk"


def test_amounts_at_least_zero() -> None:
    assert tenant_from_fields("t", 1, {"cpu": 0}, {"memory": 0}).limit == {"memory": 0}
    assert _refused(quota={"cpu": -0.5}).field == "quota.cpu"
    assert _refused(limit={"memory": -1}).field == "limit.memory"


def test_memory_whole_bytes() -> None:
    assert tenant_from_fields("t", 1, None, {"memory": "1.5GiB"}).limit == {"memory": Fraction(3 * 2**29)}
    error = _refused(limit={"memory": 1.5})
    assert error.field == "limit.memory"
    assert "whole number of bytes" in error.message


def test_quota_at_most_limit() -> None:
    assert tenant_from_fields("t", 1, {"cpu": 4}, {"cpu": 4}).quota == {"cpu": 4}
    error = _refused(quota={"cpu": "4.01"}, limit={"cpu": 4})
    assert error.field == "quota.cpu"
    assert "guarantee 4.01 is above the limit 4" in error.message


def test_a_group_carries_a_weight_only() -> None:
    assert tenant_from_fields("team-a/web", 2, None, None).weight == 2
    assert _refused("team-a/web", quota={"cpu": 1}).field == "quota"
    assert _refused("team-a/web", limit={"cpu": 1}).field == "limit"
