"""A tenant's limit, quota and DRF share count the CPU its containers *request*, bound or not; a node's free cores
count only what cpusets hold (memory-prime CPU may be oversold on a node). docs/fairness-and-scoring.md, "What is
counted where"."""

from __future__ import annotations

from fractions import Fraction

from eru.fairness import PendingRequest, Tenant, TenantUsage, admission_order
from eru.fairness.admission_json import solve_admission
from eru.fairness.ledger import Ledger
from eru.planning import PlanningConfig, normalize_request
from eru.planning.snapshot import instance_demand, instance_reserves

GiB = 1024**3
CONFIG = PlanningConfig()
POD = {"cpu": Fraction(64), "memory": Fraction(256 * GiB)}


def _unbound(cores: float) -> dict[str, Fraction]:
    request = normalize_request({"cpu_bind": False, "cpu_request": cores, "memory_request": GiB}, CONFIG)
    return instance_demand(request, CONFIG.share_base)


def _times(amounts: dict[str, Fraction], count: int) -> dict[str, Fraction]:
    return {name: amount * count for name, amount in amounts.items()}


def test_an_unbound_instance_demands_its_requested_cores_but_reserves_none() -> None:
    unbound = normalize_request({"cpu_bind": False, "cpu_request": 12, "memory_request": GiB}, CONFIG)
    bound = normalize_request({"cpu_bind": True, "cpu_request": 1.5, "memory_request": GiB}, CONFIG)
    # cpu_request 0 with a limit: the request is the limit (docs/planning.md), so it counts as 2 cores
    limited = normalize_request({"cpu_bind": False, "cpu_limit": 2, "memory_request": GiB}, CONFIG)
    assert instance_demand(unbound, 100) == {"cpu": 12, "memory": GiB}
    assert instance_reserves(unbound, 100) == {"cpu": 0, "memory": GiB}
    assert instance_demand(bound, 100) == instance_reserves(bound, 100) == {"cpu": Fraction(3, 2), "memory": GiB}
    assert instance_demand(limited, 100)["cpu"] == 2


def test_ten_unbound_twelve_core_instances_are_over_a_limit_of_eight() -> None:
    tenants = {"L": Tenant("L", limit={"cpu": Fraction(8)})}
    demand = _times(_unbound(12), 10)
    pending = [PendingRequest("big", "L", demand, 10, 0, reserves={"cpu": Fraction(0), "memory": 10 * GiB})]
    decision = admission_order(pending, tenants, {}, POD, POD)
    assert decision.admitted == []
    (verdict,) = decision.rejected
    assert verdict.code == "over_limit"
    assert verdict.details["cpu"] == {"limit": 8, "allocated": 0, "need": 120}

    # holding 6 requested (unbound) cores, 3 more go over the limit of 8: it waits with code `limit`
    held = {"L": TenantUsage(_times(_unbound(3), 2), 2)}
    more = [PendingRequest("more", "L", _unbound(3), 1, 1, reserves={"cpu": Fraction(0), "memory": GiB})]
    decision = admission_order(more, tenants, held, POD, POD)
    (waiting,) = decision.waiting
    assert (waiting.code, waiting.details["cpu"]) == ("limit", {"limit": 8, "allocated": 6, "need": 3})


def test_unbound_cpu_may_oversell_the_pod_for_a_tenant_without_limit() -> None:
    # 20 x 16 unbound cores on 64: no limit, no core taken from the nodes -> admitted (Eru's memory-prime oversell)
    demand = _times(_unbound(16), 20)
    pending = [PendingRequest("wide", "U", demand, 20, 0, reserves={"cpu": Fraction(0), "memory": 20 * GiB})]
    free = {"cpu": Fraction(0), "memory": POD["memory"]}  # every core bound by others
    decision = admission_order(pending, {"U": Tenant("U")}, {}, POD, free)
    assert decision.admitted == ["wide"]
    # the same demand, bound, would be larger than the pod: rejected
    bound = [PendingRequest("wide", "U", demand, 20, 0)]
    assert [v.code for v in admission_order(bound, {"U": Tenant("U")}, {}, POD, POD).rejected] == ["over_totals"]


def test_requested_unbound_cpu_counts_in_drf_shares_and_quota() -> None:
    tenants = {"A": Tenant("A", quota={"cpu": Fraction(4)}), "B": Tenant("B")}
    usage = {"A": TenantUsage(_times(_unbound(12), 10), 10), "B": TenantUsage({"cpu": Fraction(8)}, 8)}
    ledger = Ledger(tenants, POD, POD, usage)
    # A requests 120 of 64 cores: dominant share 120/64 > B's 8/64, so B is served first
    assert ledger.tenant_key("A", 0)[1] == Fraction(120, 64)
    assert ledger.pick({"A": 0, "B": 1}) == "B"
    # A's 120 requested cores meet its quota of 4: nothing is held back as headroom for it
    assert ledger.guarantee_left("A") == {"cpu": 0}
    assert ledger.required_headroom() == {"cpu": 0}


def test_charging_takes_only_what_is_reserved_from_free() -> None:
    ledger = Ledger({"A": Tenant("A")}, POD, POD, {})
    ledger.charge("A", _times(_unbound(12), 10), 10, {"cpu": Fraction(0), "memory": 10 * GiB})
    assert ledger.rolled("A").allocated["cpu"] == 120
    assert ledger.free == {"cpu": 64, "memory": 246 * GiB}


def test_json_problem_carries_reserves_and_old_problems_read_the_same() -> None:
    problem = {
        "totals": {"cpu": 64, "memory": "256GiB"},
        "tenants": [{"name": "L", "limit": {"cpu": 8}}],
        "pending": [
            {"id": "big", "tenant": "L", "demand": {"cpu": 120, "memory": "10GiB"}, "instances": 10},
            {"id": "small", "tenant": "L", "demand": {"cpu": 6, "memory": "2GiB"}, "instances": 2,
             "reserves": {"cpu": 0, "memory": "2GiB"}},
        ],
    }  # fmt: skip
    answer = solve_admission(problem)
    assert answer["admitted"] == ["small"]
    assert [(v["id"], v["code"]) for v in answer["rejected"]] == [("big", "over_limit")]
    # a recorded problem without `reserves` (bound CPU only, as before) decides as it did
    old = {"totals": {"cpu": 4}, "free": {"cpu": 1}, "pending": [{"id": "x", "tenant": "T", "demand": {"cpu": 2}}],
           "tenants": [{"name": "T"}]}  # fmt: skip
    assert [v["code"] for v in solve_admission(old)["waiting"]] == ["capacity"]
