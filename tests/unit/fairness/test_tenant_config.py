"""Tenant settings at the user edge: exact values, and errors that name the field."""

from __future__ import annotations

from fractions import Fraction

import pytest

from eru.errors import InvalidInput
from eru.fairness.tenant_config import parse_amounts, stored_amounts, tenant_from_fields, tenant_from_row


def test_amounts_are_exact_and_memory_takes_units() -> None:
    tenant = tenant_from_fields("t", "0.5", {"cpu": "1.5", "memory": "8GiB"}, {"cpu": 3})
    assert tenant.weight == Fraction(1, 2)
    assert tenant.quota == {"cpu": Fraction(3, 2), "memory": Fraction(8 * 1024**3)}
    assert stored_amounts(tenant.quota) == {"cpu": 1.5, "memory": 8 * 1024**3}
    back = tenant_from_row("t", "0.5", stored_amounts(tenant.quota), stored_amounts(tenant.limit))
    assert back == tenant


@pytest.mark.parametrize(
    ("weight", "quota", "limit", "field"),
    [
        (0, {}, {}, "weight"),
        (-1, {}, {}, "weight"),
        ("heavy", {}, {}, "weight"),
        (1, {"cpu": -1}, {}, "quota.cpu"),
        (1, {"gpu": 1}, {}, "quota.gpu"),
        (1, {}, {"memory": "lots"}, "limit.memory"),
        (1, {}, {"memory": 1.5}, "limit.memory"),
        (1, {}, [1], "limit"),
    ],
)
def test_bad_settings_name_the_field(weight: object, quota: object, limit: object, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        tenant_from_fields("t", weight, quota, limit)
    assert caught.value.field == field


def test_no_amounts_means_none() -> None:
    assert parse_amounts(None, "limit") == {}
    assert parse_amounts({}, "limit") == {}
