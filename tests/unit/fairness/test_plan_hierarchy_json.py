"""`eru plan` kinds drf and admission with groups, quota headroom and reservations (JSON in, JSON out), worked by
hand in the comments."""

from __future__ import annotations

from typing import Any

import pytest

from eru.errors import InvalidInput
from eru.plan_api import solve


def test_admission_with_groups_reservations_and_headroom() -> None:
    # 10 cores, 8 free. G: quota 4, reserved 1 (unused) → consumed 0 + 1 = 1, guarantee left 3. T holds 2 (web 2).
    # Unreserved free = 8 − 1 = 7; headroom held for G = 3 → others may take 7 − 3 = 4.
    # Pending (1 core each unless said): T/batch 3 cores (arrival 0), T/web 2 cores (1), G 1 core (2).
    # Level 1: G is below its quota → first: g (uses its own reservation: no headroom change). Then T: inside T,
    # batch (0) before web (2/10 / 1): batch 3 ≤ 4 spare → admitted; web 2 > 1 spare → headroom, naming G.
    problem: dict[str, Any] = {
        "kind": "admission",
        "totals": {"cpu": 10},
        "free": {"cpu": 8},
        "tenants": [
            {"name": "G", "quota": {"cpu": 4}, "reserved": {"cpu": 1}},
            {"name": "T"},
            {"name": "T/web", "allocated": {"cpu": 2}, "allocations": 2},
            {"name": "T/batch"},
        ],
        "pending": [
            {"id": "batch", "tenant": "T/batch", "demand": {"cpu": 3}, "instances": 3, "arrival": 0},
            {"id": "web", "tenant": "T/web", "demand": {"cpu": 2}, "instances": 2, "arrival": 1},
            {"id": "g", "tenant": "G", "demand": {"cpu": 1}, "instances": 1, "arrival": 2},
        ],
    }
    answer = solve(problem)
    assert answer["admitted"] == ["g", "batch"]
    (web,) = answer["waiting"]
    assert (web["id"], web["code"]) == ("web", "headroom")
    assert web["details"]["guarantees"] == {"G": {"cpu": 3}}
    assert web["details"]["resources"]["cpu"] == {"need": 2, "available": 1, "headroom": 3, "unreserved_free": 4}
    # after: free 8 − 1 − 3 = 4, G's reservation used → unreserved free 4, guarantee left 4 − 1 = 3
    assert answer["headroom"] == {"cpu": {"required": 3, "available": 4}}


def test_drf_with_groups_headroom_and_a_reservation() -> None:
    # 10 cores; Q quota 4 but runs at most 2 tasks → 2 of its guarantee stay held; R reserved 2 and runs groups
    # R/a (weight 1) and R/b (weight 3) with 1-core tasks; S unlimited 1-core tasks.
    # Capacity for R and S beyond Q: 10 − 2 (Q) − 2 (Q's guarantee left) = 6 spare, of which R's 2 reserved are R's
    # only. DRF: R and S end with 3 each (R: 2 reserved + 1), R's split weight 1:3 → R/a ≈ 1, R/b 2.
    answer = solve(
        {
            "kind": "drf",
            "totals": {"cpu": 10},
            "tenants": [
                {"name": "Q", "quota": {"cpu": 4}, "demand": {"cpu": 1}, "max_tasks": 2},
                {"name": "R", "reserved": {"cpu": 2}},
                {"name": "R/a", "demand": {"cpu": 1}},
                {"name": "R/b", "weight": 3, "demand": {"cpu": 1}},
                {"name": "S", "demand": {"cpu": 1}},
            ],
        }
    )
    assert answer["tasks"]["Q"] == 2
    assert answer["tasks"]["R/a"] + answer["tasks"]["R/b"] == 3
    assert answer["tasks"]["S"] == 3
    assert answer["tasks"]["R/b"] == 2
    assert answer["stopped"]["S"]["reason"] == "headroom"
    assert answer["headroom"] == {"cpu": {"required": 2, "available": 2}}


@pytest.mark.parametrize(
    ("tenants", "field"),
    [
        ([{"name": "T/web", "demand": {"cpu": 1}, "quota": {"cpu": 1}}], "tenants.T/web"),
        (
            [{"name": "T", "demand": {"cpu": 1}}, {"name": "T/web", "reserved": {"cpu": 1}, "demand": {"cpu": 1}}],
            "tenants[1].reserved",
        ),
        ([{"name": "T"}], "tenants[0].demand"),
        ([{"name": "T", "reserved": {"gpu": 1}, "demand": {"cpu": 1}}], "tenants[0].reserved.gpu"),
        ([{"name": "T", "reserved": {"cpu": 11}, "demand": {"cpu": 1}}], "tenants"),
    ],
)
def test_bad_hierarchy_input_names_the_field(tenants: list[dict[str, Any]], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        solve({"kind": "drf", "totals": {"cpu": 10}, "tenants": tenants})
    assert caught.value.field == field
