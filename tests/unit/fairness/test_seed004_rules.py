"""Seed 004's rules (Mesos' hierarchical allocator as the seed tells it), each with a worked example derived by hand
in the comments: weights, two levels, quota as a cluster-wide guarantee with headroom, reservations that only their
tenant may use and that count toward its quota, limits over a tenant's whole tree."""

from __future__ import annotations

from fractions import Fraction

import pytest

from eru.errors import InvalidInput
from eru.fairness import PendingRequest, Tenant, TenantUsage, admission_order
from eru.fairness.filling import FillingTenant, progressive_filling
from eru.fairness.ledger import Ledger

CPU = {"cpu": Fraction(1)}


def _cpu(amount: int) -> dict[str, Fraction]:
    return {"cpu": Fraction(amount)}


def _pending(tenant: str, count: int, first: int = 0, cpu: int = 1) -> list[PendingRequest]:
    return [PendingRequest(f"{tenant}-{i}", tenant, _cpu(cpu), 1, first + i) for i in range(count)]


def test_weights_one_to_two_share_two_to_one() -> None:
    # seed: weights 1:2 → "you two, me one". 6 one-core tasks on 6 cores: the weighted shares x/6/1 = y/6/2 with
    # x + y = 6 → x = 2, y = 4; both weighted shares 2/6 = 1/3.
    result = progressive_filling(
        _cpu(6),
        [FillingTenant(Tenant("B", Fraction(2)), CPU), FillingTenant(Tenant("A"), CPU)],
    )
    assert result.tasks == {"B": 4, "A": 2}
    assert result.shares == {"B": Fraction(1, 3), "A": Fraction(1, 3)}


def test_two_levels_sort_tenants_then_groups() -> None:
    # 12 cores, one-core tasks. Level 1: T and U weight 1 → 6 each. Level 2 inside T: web weight 2, batch weight 1 →
    # web 4, batch 2 (4/12/2 = 2/12/1). T's share is its groups' sum: 6/12 = 1/2, like U's.
    result = progressive_filling(
        _cpu(12),
        [
            FillingTenant(Tenant("T"), None),
            FillingTenant(Tenant("T/web", Fraction(2)), CPU),
            FillingTenant(Tenant("T/batch"), CPU),
            FillingTenant(Tenant("U"), CPU),
        ],
    )
    assert result.tasks == {"T": 0, "T/web": 4, "T/batch": 2, "U": 6}
    assert result.shares["T"] == result.shares["U"] == Fraction(1, 2)
    assert result.shares["T/web"] == result.shares["T/batch"] == Fraction(1, 6)


def test_a_tenant_with_many_groups_gets_no_more_than_one_without() -> None:
    # level 1 sees the tenant's sum: 3 groups of T against U alone on 8 cores → T 4 (split 2/1/1 or so), U 4
    result = progressive_filling(
        _cpu(8),
        [
            FillingTenant(Tenant("T"), None),
            FillingTenant(Tenant("T/a"), CPU),
            FillingTenant(Tenant("T/b"), CPU),
            FillingTenant(Tenant("T/c"), CPU),
            FillingTenant(Tenant("U"), CPU),
        ],
    )
    assert result.tasks["U"] == 4
    assert result.tasks["T/a"] + result.tasks["T/b"] + result.tasks["T/c"] == 4


def test_quota_is_a_guarantee_held_as_headroom() -> None:
    # seed: quota = a minimum guaranteed across the cluster. Pod of 10 cores; G has quota 4 and holds nothing;
    # B floods 10 one-core requests. Headroom needed = 4 − 0 = 4, so B may take 10 − 4 = 6; the 7th waits with code
    # `headroom`, naming G.
    tenants = {"G": Tenant("G", quota=_cpu(4)), "B": Tenant("B")}
    decision = admission_order(_pending("B", 10), tenants, {}, _cpu(10), _cpu(10))
    assert decision.admitted == [f"B-{i}" for i in range(6)]
    first = decision.waiting[0]
    assert (first.id, first.code) == ("B-6", "headroom")
    assert "G" in first.message
    assert first.details["guarantees"] == {"G": _cpu(4)}
    assert decision.headroom == {"cpu": {"required": Fraction(4), "available": Fraction(4)}}


def test_the_guaranteed_tenant_gets_its_quota_after_the_burst() -> None:
    # after the burst above: B holds 6, free 4. G asks 4 × 1 core: within its guarantee, all admitted; B's waiting
    # requests stay behind (free 0).
    tenants = {"G": Tenant("G", quota=_cpu(4)), "B": Tenant("B")}
    usage = {"B": TenantUsage(_cpu(6), 6)}
    pending = _pending("B", 4, first=6) + _pending("G", 4, first=10)
    decision = admission_order(pending, tenants, usage, _cpu(10), _cpu(4))
    assert decision.admitted == [f"G-{i}" for i in range(4)]
    assert decision.waiting[0].code == "capacity"


def test_a_tenant_beyond_its_guarantee_leaves_the_others_headroom() -> None:
    # G (quota 2) and H (quota 3) on 10 cores, nothing held. G asks 8 cores in one request: 2 within its
    # guarantee, 6 beyond; beyond must leave H's 3: 10 − 2 − 3 = 5 spare < 6 → headroom, naming H. 7 cores fit
    # (2 + 5).
    tenants = {"G": Tenant("G", quota=_cpu(2)), "H": Tenant("H", quota=_cpu(3))}
    refused = admission_order([PendingRequest("g8", "G", _cpu(8), 1, 0)], tenants, {}, _cpu(10), _cpu(10))
    assert refused.waiting[0].code == "headroom"
    assert refused.waiting[0].details["guarantees"] == {"H": _cpu(3)}
    assert refused.waiting[0].details["resources"]["cpu"]["need"] == 6
    assert refused.waiting[0].details["resources"]["cpu"]["available"] == 5
    fits = admission_order([PendingRequest("g7", "G", _cpu(7), 1, 0)], tenants, {}, _cpu(10), _cpu(10))
    assert fits.admitted == ["g7"]


def test_within_its_own_guarantee_a_tenant_is_not_held_by_headroom() -> None:
    # guarantees larger than the pod (quota 6 + 6 on 10 cores): G asking 5 of its 6 is within its own guarantee
    tenants = {"G": Tenant("G", quota=_cpu(6)), "H": Tenant("H", quota=_cpu(6))}
    decision = admission_order([PendingRequest("g5", "G", _cpu(5), 1, 0)], tenants, {}, _cpu(10), _cpu(10))
    assert decision.admitted == ["g5"]


def test_reserved_resources_count_toward_quota() -> None:
    # seed: reserved resources count toward quota. G quota 2 but reserved 3 (unused): consumed = 0 + 3 ≥ 2 → no
    # guarantee left, no headroom held. Unreserved free = 10 − 3 = 7: B takes 7. (Were reservations not counted,
    # 2 more would be held back and B would get 5.)
    tenants = {"G": Tenant("G", quota=_cpu(2)), "B": Tenant("B")}
    decision = admission_order(_pending("B", 10), tenants, {}, _cpu(10), _cpu(10), reserved={"G": _cpu(3)})
    assert len(decision.admitted) == 7
    assert decision.waiting[0].code == "capacity"
    assert decision.waiting[0].details == {"cpu": {"need": 1, "available": 0}}


def test_reservation_within_quota_leaves_the_rest_as_headroom() -> None:
    # G quota 4, reserved 3: consumed 3, guarantee left 1. Unreserved free 10 − 3 = 7, headroom 1 → B takes 6.
    ledger = Ledger(
        {"G": Tenant("G", quota=_cpu(4)), "B": Tenant("B")}, _cpu(10), _cpu(10), {}, reserved={"G": _cpu(3)}
    )
    assert ledger.guarantee_left("G") == _cpu(1)
    assert ledger.headroom() == {"cpu": {"required": Fraction(1), "available": Fraction(7)}}
    decision = admission_order(
        _pending("B", 10),
        {"G": Tenant("G", quota=_cpu(4)), "B": Tenant("B")},
        {},
        _cpu(10),
        _cpu(10),
        reserved={"G": _cpu(3)},
    )
    assert len(decision.admitted) == 6


def test_reserved_resources_are_only_for_their_tenant() -> None:
    # seed: resources reserved for another role are never offered. G reserved 3 of 10 cores (no quota): B sees 7;
    # G sees all 10 (its 3 + the 7 unreserved) and uses its reservation first.
    tenants = {"G": Tenant("G"), "B": Tenant("B")}
    b = admission_order(
        [PendingRequest("b8", "B", _cpu(8), 1, 0)], tenants, {}, _cpu(10), _cpu(10), reserved={"G": _cpu(3)}
    )
    assert b.waiting[0].code == "capacity"
    assert b.waiting[0].details == {"cpu": {"need": 8, "available": 7}}
    g = admission_order(
        [PendingRequest("g10", "G", _cpu(10), 1, 0)], tenants, {}, _cpu(10), _cpu(10), reserved={"G": _cpu(3)}
    )
    assert g.admitted == ["g10"]


def test_a_used_reservation_is_no_longer_withheld() -> None:
    # G reserved 3 and its containers use 2 of them: only 1 is withheld from B → B sees 10 − 2 (G's) − 1 = 7 of the
    # 8 free
    tenants = {"G": Tenant("G"), "B": Tenant("B")}
    usage = {"G": TenantUsage(_cpu(2), 2)}
    b = admission_order(
        [PendingRequest("b8", "B", _cpu(8), 1, 0)],
        tenants,
        usage,
        _cpu(10),
        _cpu(8),
        reserved={"G": _cpu(3)},
        reserved_used={"G": _cpu(2)},
    )
    assert b.waiting[0].details == {"cpu": {"need": 8, "available": 7}}


def test_the_limit_caps_the_whole_tree() -> None:
    # T limit 5 cores; web holds 3, batch asks 3 → 6 > 5: limit (T's numbers)
    tenants = {"T": Tenant("T", limit=_cpu(5)), "T/web": Tenant("T/web"), "T/batch": Tenant("T/batch")}
    usage = {"T/web": TenantUsage(_cpu(3), 3)}
    decision = admission_order([PendingRequest("b3", "T/batch", _cpu(3), 3, 0)], tenants, usage, _cpu(10), _cpu(7))
    assert decision.waiting[0].code == "limit"
    assert decision.waiting[0].details == {"cpu": {"limit": 5, "allocated": 3, "need": 3}}


def test_below_quota_tenants_go_first() -> None:
    # seed: the quota roles are sorted first. G (quota 2, holds 1) has the larger share (1/10 vs 0) yet goes first
    tenants = {"G": Tenant("G", quota=_cpu(2)), "B": Tenant("B")}
    usage = {"G": TenantUsage(_cpu(1), 1)}
    pending = _pending("B", 1) + _pending("G", 1, first=1)
    decision = admission_order(pending, tenants, usage, _cpu(10), _cpu(9))
    assert decision.admitted == ["G-0", "B-0"]


def test_admission_picks_the_tenant_then_the_group() -> None:
    # level 1: T (web holds 2 → 2/10) vs U (holds 1 → 1/10): U goes first. Then only T has requests; level 2 inside
    # T: batch (0) before web (2/10), although web arrived first.
    tenants = {"T": Tenant("T"), "T/web": Tenant("T/web"), "T/batch": Tenant("T/batch"), "U": Tenant("U")}
    usage = {"T/web": TenantUsage(_cpu(2), 2), "U": TenantUsage(_cpu(1), 1)}
    pending = [
        PendingRequest("web", "T/web", CPU, 1, 0),
        PendingRequest("batch", "T/batch", CPU, 1, 1),
        PendingRequest("u", "U", CPU, 1, 2),
    ]
    decision = admission_order(pending, tenants, usage, _cpu(10), _cpu(7))
    assert decision.admitted == ["u", "batch", "web"]


@pytest.mark.parametrize(
    ("tenants", "words"),
    [
        ({"T/web": Tenant("T/web")}, "unknown tenant 'T'"),
        ({"T": Tenant("T"), "T/web": Tenant("T/web", quota=_cpu(1))}, "weight only"),
        ({"T": Tenant("T"), "T/a/b": Tenant("T/a/b")}, "two levels"),
    ],
)
def test_groups_are_checked(tenants: dict[str, Tenant], words: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        admission_order([], tenants, {}, _cpu(1), _cpu(1))
    assert words in caught.value.message
