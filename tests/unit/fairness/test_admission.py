"""Admission of waiting deploy requests in hierarchical DRF order (docs/fairness-and-scoring.md)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eru.errors import InvalidInput, PlanningFailure
from eru.fairness import PendingRequest, Tenant, TenantUsage, admission_order, charge, check_limit

TOTALS = {"cpu": Fraction(9), "memory": Fraction(18)}


def request(rid: str, tenant: str, cpu: int, memory: int, arrival: int, instances: int = 1) -> PendingRequest:
    return PendingRequest(rid, tenant, {"cpu": Fraction(cpu), "memory": Fraction(memory)}, instances, arrival)


def test_two_tenants_flooding_converge_to_the_canonical_drf_split() -> None:
    tenants = {"A": Tenant("A"), "B": Tenant("B")}
    pending = [request(f"a{i}", "A", 1, 4, i) for i in range(6)] + [
        request(f"b{i}", "B", 3, 1, 10 + i) for i in range(6)
    ]
    decision = admission_order(pending, tenants, {}, TOTALS, TOTALS)
    assert decision.admitted == ["a0", "b0", "a1", "b1", "a2"]
    assert decision.rejected == []
    waiting = {verdict.id: verdict.code for verdict in decision.waiting}
    assert waiting["a3"] == "capacity"
    assert waiting["b2"] == "capacity"
    assert waiting["a4"] == "queued"


def test_current_allocations_count_and_freed_capacity_goes_to_the_poorer_tenant() -> None:
    tenants = {"A": Tenant("A"), "B": Tenant("B")}
    usage = {
        "A": TenantUsage({"cpu": Fraction(3), "memory": Fraction(12)}, 3),
        "B": TenantUsage({"cpu": Fraction(3), "memory": Fraction(1)}, 1),
    }
    free = {"cpu": Fraction(3), "memory": Fraction(5)}
    pending = [request("a", "A", 1, 4, 0), request("b", "B", 3, 1, 1)]
    decision = admission_order(pending, tenants, usage, TOTALS, free)
    assert decision.admitted == ["b"]  # B's share 1/3 < A's 2/3, although A's request arrived first
    assert [v.id for v in decision.waiting] == ["a"]


def test_a_tenant_below_quota_is_admitted_first() -> None:
    tenants = {"A": Tenant("A"), "B": Tenant("B", quota={"cpu": Fraction(6)})}
    usage = {"A": TenantUsage({"cpu": Fraction(1)}, 1), "B": TenantUsage({"cpu": Fraction(5)}, 5)}
    free = {"cpu": Fraction(1), "memory": Fraction(18)}
    decision = admission_order([request("a", "A", 1, 0, 0), request("b", "B", 1, 0, 1)], tenants, usage, TOTALS, free)
    assert decision.admitted == ["b"]


def test_limit_holds_a_request_and_an_impossible_one_is_rejected() -> None:
    tenants = {"A": Tenant("A", limit={"cpu": Fraction(4)}), "B": Tenant("B")}
    usage = {"A": TenantUsage({"cpu": Fraction(3)}, 3)}
    pending = [request("a1", "A", 2, 0, 0), request("a2", "A", 5, 0, 1), request("b1", "B", 1, 0, 2)]
    decision = admission_order(pending, tenants, usage, TOTALS, TOTALS)
    assert decision.admitted == ["b1"]
    assert [(v.id, v.code) for v in decision.waiting] == [("a1", "limit")]
    assert decision.waiting[0].details == {"cpu": {"limit": Fraction(4), "allocated": Fraction(3), "need": Fraction(2)}}
    assert [(v.id, v.code) for v in decision.rejected] == [("a2", "over_limit")]


def test_check_limit_error_names_resource_and_numbers() -> None:
    tenant = Tenant("A", limit={"cpu": Fraction(4)})
    with pytest.raises(PlanningFailure) as caught:
        check_limit(tenant, TenantUsage({"cpu": Fraction(3)}, 3), {"cpu": Fraction(2)})
    assert caught.value.code == "tenant_limit"
    assert caught.value.details["resources"] == {"cpu": {"limit": 4.0, "allocated": 3.0, "need": 2.0}}
    assert "cpu" in caught.value.message
    check_limit(tenant, TenantUsage({"cpu": Fraction(2)}, 2), {"cpu": Fraction(2)})  # exactly at the limit is fine


def test_equal_tenants_tie_on_arrival_of_their_oldest_request() -> None:
    tenants = {"A": Tenant("A"), "B": Tenant("B")}
    pending = [request("b", "B", 1, 1, 0), request("a", "A", 1, 1, 1)]
    assert admission_order(pending, tenants, {}, TOTALS, TOTALS).admitted == ["b", "a"]
    pending = [request("b", "B", 1, 1, 5), request("a", "A", 1, 1, 1)]
    assert admission_order(pending, tenants, {}, TOTALS, TOTALS).admitted == ["a", "b"]


def test_node_level_fit_callback_is_honoured() -> None:
    tenants = {"A": Tenant("A"), "B": Tenant("B")}
    pending = [request("big", "A", 4, 1, 0), request("small", "B", 1, 1, 1)]
    decision = admission_order(pending, tenants, {}, TOTALS, TOTALS, fits=lambda r, free: r.demand["cpu"] <= 2)
    assert decision.admitted == ["small"]
    assert decision.waiting[0].id == "big"


def test_charge_adds_demand_and_instances() -> None:
    usage = charge({}, "A", {"cpu": Fraction(2)}, 2)
    usage = charge(usage, "A", {"cpu": Fraction(1)}, 1)
    assert usage["A"] == TenantUsage({"cpu": Fraction(3)}, 3)


def test_unknown_tenant_and_duplicate_ids_are_invalid() -> None:
    with pytest.raises(InvalidInput) as caught:
        admission_order([request("x", "Z", 1, 1, 0)], {"A": Tenant("A")}, {}, TOTALS, TOTALS)
    assert caught.value.field == "pending[0].tenant"
    with pytest.raises(InvalidInput) as caught:
        admission_order(
            [request("x", "A", 1, 1, 0), request("x", "A", 1, 1, 1)], {"A": Tenant("A")}, {}, TOTALS, TOTALS
        )
    assert caught.value.field == "pending[1].id"


def test_flooding_tenants_stay_within_one_task_of_drf_shares_as_capacity_churns() -> None:
    """Two tenants flood one pod; tasks finish at random and freed capacity is re-admitted in DRF order: after every
    round the weighted dominant shares differ by at most one task's share."""
    import random

    from eru.fairness import dominant_share
    from eru.fairness.drf import subtract

    totals = {"cpu": Fraction(90), "memory": Fraction(180)}
    demand = {"A": {"cpu": Fraction(1), "memory": Fraction(4)}, "B": {"cpu": Fraction(3), "memory": Fraction(1)}}
    tenants = {"A": Tenant("A"), "B": Tenant("B", weight=Fraction(2))}
    one_task = {name: dominant_share(demand[name], totals, tenants[name].weight) for name in tenants}
    pending = [
        PendingRequest(f"{name}{i}", name, demand[name], 1, 2 * i + (name == "B")) for i in range(200) for name in "AB"
    ]
    usage: dict[str, TenantUsage] = {}
    free = dict(totals)
    running: list[str] = []
    rng = random.Random(4)
    for _ in range(60):
        decision = admission_order(pending, tenants, usage, totals, free)
        admitted = set(decision.admitted)
        for item in pending:
            if item.id in admitted:
                usage = charge(usage, item.tenant, item.demand, 1)
                free = subtract(free, item.demand)
                running.append(item.tenant)
        pending = [item for item in pending if item.id not in admitted]
        shares = {name: dominant_share(usage[name].allocated, totals, tenants[name].weight) for name in tenants}
        assert abs(shares["A"] - shares["B"]) <= max(one_task.values())
        finished = running.pop(rng.randrange(len(running)))
        negative = {resource: -amount for resource, amount in demand[finished].items()}
        usage = charge(usage, finished, negative, -1)
        free = subtract(free, negative)


def test_admission_over_json_replays_the_same_decision() -> None:
    from eru.fairness.admission_json import solve_admission

    problem = {
        "totals": {"cpu": 9, "memory": "18GB"},
        "free": {"cpu": 3, "memory": "5GB"},
        "tenants": [
            {"name": "A", "allocated": {"cpu": 3, "memory": "12GB"}, "allocations": 3},
            {"name": "B", "allocated": {"cpu": 3, "memory": "1GB"}, "allocations": 1, "limit": {"cpu": 9}},
        ],
        "pending": [
            {"id": "a", "tenant": "A", "demand": {"cpu": 1, "memory": "4GB"}, "arrival": 0},
            {"id": "b", "tenant": "B", "demand": {"cpu": 3, "memory": "1GB"}, "arrival": 1},
            {"id": "b2", "tenant": "B", "demand": {"cpu": 30}, "arrival": 2},
        ],
    }
    answer = solve_admission(problem)
    assert answer == solve_admission(problem)
    assert answer["admitted"] == ["b"]
    assert answer["waiting"] == [
        {
            "id": "a",
            "code": "capacity",
            "message": "not enough free resources",
            "details": {"cpu": {"need": 1, "available": 0}},
        }
    ]
    assert [(v["id"], v["code"]) for v in answer["rejected"]] == [("b2", "over_limit")]
    problem["pending"][0]["tenant"] = "Z"  # type: ignore[index]
    with pytest.raises(InvalidInput) as caught:
        solve_admission(problem)
    assert caught.value.field == "pending[0].tenant"


@settings(max_examples=100, deadline=None)
@given(
    requests=st.lists(
        st.tuples(st.sampled_from("ABC"), st.integers(0, 4), st.integers(0, 6), st.integers(1, 3)), max_size=12
    ),
    limits=st.lists(st.one_of(st.none(), st.integers(0, 8)), min_size=3, max_size=3),
    free_cpu=st.integers(0, 9),
)
def test_admission_respects_free_resources_limits_and_per_tenant_arrival(
    requests: list[tuple[str, int, int, int]], limits: list[int | None], free_cpu: int
) -> None:
    tenants = {
        name: Tenant(name, Fraction(weight), limit={} if cap is None else {"cpu": Fraction(cap)})
        for name, weight, cap in zip("ABC", (1, 2, 1), limits, strict=True)
    }
    pending = [
        PendingRequest(f"r{i}", tenant, {"cpu": Fraction(cpu), "memory": Fraction(mem)}, count, i)
        for i, (tenant, cpu, mem, count) in enumerate(requests)
    ]
    free = {"cpu": Fraction(free_cpu), "memory": Fraction(18)}
    decision = admission_order(pending, tenants, {}, TOTALS, free)
    by_id = {item.id: item for item in pending}
    decided = decision.admitted + [v.id for v in decision.waiting] + [v.id for v in decision.rejected]
    assert sorted(decided) == sorted(by_id)  # every request gets exactly one outcome
    for resource in ("cpu", "memory"):
        assert sum((by_id[i].demand[resource] for i in decision.admitted), Fraction(0)) <= free[resource]
    for name, tenant in tenants.items():
        mine = [i for i in decision.admitted if by_id[i].tenant == name]
        if "cpu" in tenant.limit:
            assert sum((by_id[i].demand["cpu"] for i in mine), Fraction(0)) <= tenant.limit["cpu"]
        arrivals = [by_id[i].arrival for i in mine]
        assert arrivals == sorted(arrivals)
        waiting = [by_id[v.id].arrival for v in decision.waiting if by_id[v.id].tenant == name]
        assert not waiting or not arrivals or max(arrivals) < min(waiting)  # no overtaking within a tenant
