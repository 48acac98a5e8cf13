"""Reservations and batch capacity (docs/colocation.md), and the CFS quota spread of a batch allowance."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from eru.colocation.config import ColocationConfig
from eru.colocation.quota import MIN_QUOTA, cpu_cap, spread_quota
from eru.colocation.reservation import Reservation, batch_capacity

CONFIG = ColocationConfig(
    reservation_startup_seconds=300, reservation_half_life_seconds=100, reservation_peak_window_seconds=60
)
REQUEST = 4_000_000  # 4 cores in micro-cores


def test_reservation_is_the_request_during_start_up() -> None:
    reservation = Reservation(REQUEST, first_seen=0)
    for t in range(0, 300, 5):
        assert reservation.observe(float(t), 100_000, CONFIG) == REQUEST


def test_reservation_decays_toward_peak_plus_margin_after_start_up() -> None:
    reservation = Reservation(REQUEST, first_seen=0)
    values = [reservation.observe(float(t), 1_000_000, CONFIG) for t in range(0, 2000, 5)]
    floor = 1_000_000 + REQUEST * 10 // 100
    after = values[300 // 5 :]
    assert all(a >= b for a, b in itertools.pairwise(after))  # never rises while usage is flat
    assert after[1] < REQUEST  # decays once start-up is over
    assert after[-1] == floor or after[-1] - floor < 1000  # converges on peak + margin
    assert min(values) >= floor


def test_reservation_rises_at_once_and_never_exceeds_the_request() -> None:
    reservation = Reservation(REQUEST, first_seen=0)
    for t in range(0, 1500, 5):
        reservation.observe(float(t), 500_000, CONFIG)
    low = reservation.value
    assert low < 1_500_000
    assert reservation.observe(1500.0, 2_000_000, CONFIG) == 2_000_000 + REQUEST // 10
    assert reservation.observe(1505.0, 9_000_000, CONFIG) == REQUEST


def test_reservation_ignores_an_older_sample() -> None:
    reservation = Reservation(REQUEST, first_seen=0)
    for t in range(0, 1500, 5):
        reservation.observe(float(t), 500_000, CONFIG)
    value = reservation.value
    assert reservation.observe(10.0, 4_000_000, CONFIG) == value


def test_batch_capacity_subtracts_reservations_and_batch_requests_never_below_zero() -> None:
    capacity = batch_capacity(32_000_000, 64, 10_000_000, 20, 5_000_000, 10)
    assert (capacity.cpu, capacity.memory) == (17_000_000, 34)
    assert batch_capacity(1, 1, 5, 5, 0, 0).cpu == 0


NODE = 32_000_000  # a cap no container reaches: the spread is by request alone


def test_quota_is_spread_by_request_and_adds_up() -> None:
    quotas = spread_quota(3_000_000, [("a", 4_000_000, NODE), ("b", 2_000_000, NODE)])
    assert quotas == {"a": 2_000_000, "b": 1_000_000}


def test_quota_equal_shares_when_nobody_requests_and_minimum_per_container() -> None:
    assert spread_quota(3_000_000, [("a", 0, NODE), ("b", 0, NODE), ("c", 0, NODE)]) == dict.fromkeys("abc", 1_000_000)
    assert spread_quota(0, [("a", 1, NODE)]) == {"a": MIN_QUOTA}
    assert spread_quota(5, []) == {}


def test_quota_never_exceeds_a_containers_own_limit() -> None:
    """The issue's node: two 0.1-core batch containers allowed 0.79 cores got 0.39 each (4x their limit)."""
    quotas = spread_quota(788_440, [("a", 100_000, 100_000), ("b", 100_000, 100_000)])
    assert quotas == {"a": 100_000, "b": 100_000}


def test_quota_water_fills_what_capped_containers_cannot_take() -> None:
    # 3 cores by request 1:1:2 would be 0.75/0.75/1.5; a is capped at 0.25: its 0.5 goes to b and c by request.
    quotas = spread_quota(3_000_000, [("a", 1_000_000, 250_000), ("b", 1_000_000, NODE), ("c", 2_000_000, NODE)])
    assert quotas == {"a": 250_000, "b": 916_667, "c": 1_833_333}
    # Below the caps nothing changes; above their sum every container gets exactly its cap.
    assert spread_quota(400_000, [("a", 1, 500_000), ("b", 1, 500_000)]) == {"a": 200_000, "b": 200_000}
    assert spread_quota(5_000_000, [("a", 1, 500_000), ("b", 3, 2_000_000)]) == {"a": 500_000, "b": 2_000_000}


def test_cpu_cap_is_the_cpuset_then_the_limit_then_the_node() -> None:
    assert cpu_cap(cpu_limit=0, cpu_cores=2, node_cpu=NODE) == 2_000_000
    assert cpu_cap(cpu_limit=100_000, cpu_cores=0, node_cpu=NODE) == 100_000
    assert cpu_cap(cpu_limit=0, cpu_cores=0, node_cpu=NODE) == NODE
    assert cpu_cap(cpu_limit=0, cpu_cores=64, node_cpu=NODE) == NODE


@settings(max_examples=150, deadline=None)
@given(
    st.integers(min_value=MIN_QUOTA * 20, max_value=10**9),
    st.lists(st.integers(min_value=1, max_value=10**8), min_size=1, max_size=20),
)
def test_quota_spread_sums_to_the_allowance(allowance: int, requests: list[int]) -> None:
    pairs = [(f"c{i}", r, 10**10) for i, r in enumerate(requests)]
    quotas = spread_quota(allowance, pairs)
    total = sum(requests)
    assert allowance <= sum(quotas.values()) <= allowance + MIN_QUOTA * len(requests)
    for cid, request, _ in pairs:
        exact = allowance * request // total
        assert quotas[cid] == MIN_QUOTA if exact + 1 < MIN_QUOTA else exact <= quotas[cid] <= exact + 1


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=0, max_value=10**8),
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=10**7), st.integers(min_value=MIN_QUOTA, max_value=10**7)),
        min_size=1,
        max_size=12,
    ),
)
def test_water_filling_respects_caps_and_hands_out_all_it_can(allowance: int, rows: list[tuple[int, int]]) -> None:
    containers = [(f"c{i}", request, cap) for i, (request, cap) in enumerate(rows)]
    quotas = spread_quota(allowance, containers)
    caps = {cid: cap for cid, _, cap in containers}
    assert all(MIN_QUOTA <= quotas[cid] <= caps[cid] for cid in caps)  # never above a container's own limit
    total = sum(quotas.values())
    lifted = sum(max(0, MIN_QUOTA - q) for q in quotas.values())  # at most the kernel floor added per container
    assert min(allowance, sum(caps.values())) <= total <= max(allowance, 0) + MIN_QUOTA * len(caps) + lifted
    if allowance >= sum(caps.values()):
        assert quotas == caps
    # A container below its cap gets no less (per request) than any capped one would have: nobody starves while
    # another below its cap is favoured: quotas of uncapped containers follow their requests.
    open_rows = [(cid, r) for cid, r, cap in containers if quotas[cid] < cap and quotas[cid] > MIN_QUOTA and r > 0]
    for (a, ra), (b, rb) in itertools.pairwise(open_rows):
        assert abs(quotas[a] * rb - quotas[b] * ra) <= ra + rb
