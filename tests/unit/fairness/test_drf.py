"""DRF (docs/fairness-and-scoring.md): the canonical example, weights, quota first, limits, tie rules, and `eru plan`
kind drf."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eru.errors import InvalidInput
from eru.fairness import (
    FillingTenant,
    Tenant,
    TenantUsage,
    dominant_share,
    drf_order,
    progressive_filling,
)
from eru.fairness.plan_kind import solve_drf

GB = 10**9
CANONICAL: dict[str, Any] = {
    "kind": "drf",
    "totals": {"cpu": 9, "memory": "18GB"},
    "tenants": [
        {"name": "A", "weight": 1, "demand": {"cpu": 1, "memory": "4GB"}},
        {"name": "B", "weight": 1, "demand": {"cpu": 3, "memory": "1GB"}},
    ],
}


def test_canonical_example_gives_A_three_tasks_and_B_two_with_equal_shares() -> None:
    answer = solve_drf(CANONICAL)
    assert answer["tasks"] == {"A": 3, "B": 2}
    assert answer["shares"] == {"A": 0.667, "B": 0.667}
    assert answer["shares_exact"] == {"A": "2/3", "B": "2/3"}
    assert answer["allocated"] == {"A": {"cpu": 3, "memory": 12 * GB}, "B": {"cpu": 6, "memory": 2 * GB}}
    assert answer["order"] == ["A", "B", "A", "B", "A"]
    assert answer["stopped"]["B"] == {"reason": "capacity", "resources": {"cpu": {"need": 3, "available": 0}}}


def test_dominant_share_is_the_largest_resource_fraction_divided_by_the_weight() -> None:
    totals = {"cpu": Fraction(9), "memory": Fraction(18)}
    assert dominant_share({"cpu": Fraction(3), "memory": Fraction(12)}, totals) == Fraction(2, 3)
    assert dominant_share({"cpu": Fraction(6), "memory": Fraction(2)}, totals, Fraction(2)) == Fraction(1, 3)
    assert dominant_share({}, totals) == 0


@pytest.mark.parametrize(("weight_a", "weight_b"), [(1, 2), (2, 1), (1, 3)])
def test_weights_give_dominant_shares_in_their_ratio_within_one_task(weight_a: int, weight_b: int) -> None:
    problem = {
        "totals": {"cpu": 120, "memory": "480GB"},
        "tenants": [
            {"name": "A", "weight": weight_a, "demand": {"cpu": 1, "memory": "1GB"}},
            {"name": "B", "weight": weight_b, "demand": {"cpu": "0.5", "memory": "0.5GB"}},
        ],
    }
    answer = solve_drf(problem)
    share_a, share_b = (Fraction(answer["shares_exact"][name]) for name in ("A", "B"))
    one_task = Fraction(1, 120)  # the largest dominant share a single task adds (A's cpu)
    assert abs(share_a - share_b) <= one_task / min(weight_a, weight_b)
    raw_a, raw_b = share_a * weight_a, share_b * weight_b
    assert abs(raw_a * weight_b - raw_b * weight_a) <= one_task * max(weight_a, weight_b)


def test_tenant_below_its_quota_is_served_first_even_with_a_higher_share() -> None:
    totals = {"cpu": Fraction(10)}
    tenants = [
        FillingTenant(Tenant("A"), {"cpu": Fraction(1)}),
        FillingTenant(Tenant("B", quota={"cpu": Fraction(6)}), {"cpu": Fraction(1)}),
    ]
    result = progressive_filling(totals, tenants)
    assert result.order[:6] == ["B"] * 6  # B climbs to its quota before A gets anything
    assert result.tasks == {"A": 4, "B": 6}  # then A catches up to B's share while capacity lasts


def test_quota_order_also_in_drf_order_snapshot() -> None:
    totals = {"cpu": Fraction(10)}
    tenants = [Tenant("A"), Tenant("B", quota={"cpu": Fraction(5)})]
    usage = {"A": TenantUsage({"cpu": Fraction(1)}, 1), "B": TenantUsage({"cpu": Fraction(4)}, 4)}
    assert drf_order(tenants, usage, totals) == ["B", "A"]
    usage["B"] = TenantUsage({"cpu": Fraction(5)}, 5)
    assert drf_order(tenants, usage, totals) == ["A", "B"]


def test_limit_is_never_exceeded_and_reported() -> None:
    answer = solve_drf(
        {
            "totals": {"cpu": 10},
            "tenants": [
                {"name": "A", "demand": {"cpu": 2}, "limit": {"cpu": 5}},
                {"name": "B", "demand": {"cpu": 1}},
            ],
        }
    )
    assert answer["tasks"]["A"] == 2  # a third task would take A to 6 > 5
    assert answer["tasks"]["B"] == 6
    assert answer["stopped"]["A"] == {
        "reason": "limit",
        "resources": {"cpu": {"limit": 5, "allocated": 4, "need": 2}},
    }


def test_max_tasks_stops_a_tenant() -> None:
    answer = solve_drf({"totals": {"cpu": 10}, "tenants": [{"name": "A", "demand": {"cpu": 1}, "max_tasks": 3}]})
    assert answer["tasks"] == {"A": 3}
    assert answer["stopped"]["A"] == {"reason": "max_tasks", "max_tasks": 3}


def test_ties_go_to_fewer_allocations_then_arrival() -> None:
    totals = {"cpu": Fraction(100)}
    # Equal shares (2/100): A has 1 allocation of 2 cpu, B two of 1 cpu → A first (fewer allocations).
    tenants = [Tenant("B"), Tenant("A")]
    usage = {"A": TenantUsage({"cpu": Fraction(2)}, 1), "B": TenantUsage({"cpu": Fraction(2)}, 2)}
    assert drf_order(tenants, usage, totals) == ["A", "B"]
    # Equal shares and allocations: arrival order (position in the list).
    usage["A"] = TenantUsage({"cpu": Fraction(2)}, 2)
    assert drf_order(tenants, usage, totals) == ["B", "A"]
    result = progressive_filling(totals, [FillingTenant(t, {"cpu": Fraction(1)}, 2) for t in tenants])
    assert result.order == ["B", "A", "B", "A"]


@settings(max_examples=60, deadline=None)
@given(
    demands=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 5)).filter(lambda pair: pair != (0, 0)), min_size=1, max_size=4
    ),
    weights=st.lists(st.integers(1, 3), min_size=4, max_size=4),
)
def test_filling_is_maximal_and_every_step_serves_the_lowest_share(
    demands: list[tuple[int, int]], weights: list[int]
) -> None:
    totals = {"cpu": Fraction(20), "memory": Fraction(30)}
    tenants = [
        FillingTenant(Tenant(f"t{i}", Fraction(weights[i])), {"cpu": Fraction(c), "memory": Fraction(m)})
        for i, (c, m) in enumerate(demands)
    ]
    result = progressive_filling(totals, tenants)
    used = {r: sum((result.allocated[t.tenant.name].get(r, Fraction(0)) for t in tenants), Fraction(0)) for r in totals}
    for entry in tenants:  # maximal: nobody's next task fits
        assert any(used[r] + entry.demand[r] > totals[r] for r in totals)
    for resource in totals:
        assert used[resource] <= totals[resource]
    # Replaying the order, each served tenant had the lowest share among those whose task still fitted.
    held = {t.tenant.name: {r: Fraction(0) for r in totals} for t in tenants}
    counts = dict.fromkeys(held, 0)
    free = dict(totals)
    for name in result.order:
        fitting = [t for t in tenants if all(t.demand[r] <= free[r] for r in totals)]
        best = min(dominant_share(held[t.tenant.name], totals, t.tenant.weight) for t in fitting)
        served = next(t for t in tenants if t.tenant.name == name)
        assert dominant_share(held[name], totals, served.tenant.weight) == best
        for r in totals:
            held[name][r] += served.demand[r]
            free[r] -= served.demand[r]
        counts[name] += 1


@pytest.mark.parametrize(
    ("problem", "field"),
    [
        ({"tenants": [{"name": "A", "demand": {"cpu": 1}}]}, "totals"),
        ({"totals": {"cpu": 9}, "tenants": []}, "tenants"),
        ({"totals": {"cpu": 9}, "tenants": [{"name": "A", "demand": {"gpu": 1}}]}, "tenants[0].demand.gpu"),
        ({"totals": {"cpu": 9}, "tenants": [{"name": "A", "demand": {"cpu": 0}}]}, "tenants[0].demand"),
        ({"totals": {"cpu": 9}, "tenants": [{"name": "A", "weight": 0, "demand": {"cpu": 1}}]}, "tenants[0].weight"),
        ({"totals": {"cpu": -1}, "tenants": [{"name": "A", "demand": {"cpu": 1}}]}, "totals.cpu"),
        ({"totals": {"memory": "lots"}, "tenants": [{"name": "A", "demand": {"memory": 1}}]}, "totals.memory"),
        (
            {"totals": {"cpu": 9}, "tenants": [{"name": "A", "demand": {"cpu": 1}}, {"name": "A", "demand": {}}]},
            "tenants[1].name",
        ),
        (
            {"totals": {"cpu": 9}, "tenants": [{"name": "A", "demand": {"cpu": 1}, "max_tasks": -1}]},
            "tenants[0].max_tasks",
        ),
        (
            {"totals": {"cpu": 9}, "tenants": [{"name": "A", "demand": {"cpu": 1}, "quota": {"x": 1}}]},
            "tenants[0].quota.x",
        ),
        ({"totals": {"cpu": 9}, "tenants": [{"name": "A", "demand": {"cpu": 1}, "colour": 1}]}, "tenants[0]"),
    ],
)
def test_malformed_problems_name_the_field(problem: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        solve_drf(problem)
    assert caught.value.field == field


def test_weights_one_to_two_exact_split() -> None:
    answer = solve_drf(
        {
            "totals": {"cpu": 90, "memory": "90GB"},
            "tenants": [
                {"name": "A", "weight": 1, "demand": {"cpu": 1, "memory": "1GB"}},
                {"name": "B", "weight": 2, "demand": {"cpu": 1, "memory": "1GB"}},
            ],
        }
    )
    assert answer["tasks"] == {"A": 30, "B": 60}
    assert answer["dominant_shares"] == {"A": 0.333, "B": 0.667}
    assert answer["shares_exact"] == {"A": "1/3", "B": "1/3"}


def test_too_many_tasks_is_refused_with_the_field() -> None:
    tenants = [FillingTenant(Tenant("A"), {"cpu": Fraction(1)})]
    with pytest.raises(InvalidInput) as caught:
        progressive_filling({"cpu": Fraction(100)}, tenants, max_steps=10)
    assert caught.value.field == "tenants"
    assert progressive_filling({"cpu": Fraction(10)}, tenants, max_steps=10).tasks == {"A": 10}
