"""Reservations and batch capacity (docs/colocation.md), and the CFS quota spread of a batch allowance."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from eru.colocation.config import ColocationConfig
from eru.colocation.quota import MIN_QUOTA, spread_quota
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


def test_quota_is_spread_by_request_and_adds_up() -> None:
    quotas = spread_quota(3_000_000, [("a", 4_000_000), ("b", 2_000_000)])
    assert quotas == {"a": 2_000_000, "b": 1_000_000}


def test_quota_equal_shares_when_nobody_requests_and_minimum_per_container() -> None:
    assert spread_quota(3_000_000, [("a", 0), ("b", 0), ("c", 0)]) == dict.fromkeys("abc", 1_000_000)
    assert spread_quota(0, [("a", 1)]) == {"a": MIN_QUOTA}
    assert spread_quota(5, []) == {}


@settings(max_examples=150, deadline=None)
@given(
    st.integers(min_value=MIN_QUOTA * 20, max_value=10**9),
    st.lists(st.integers(min_value=1, max_value=10**8), min_size=1, max_size=20),
)
def test_quota_spread_sums_to_the_allowance(allowance: int, requests: list[int]) -> None:
    pairs = [(f"c{i}", r) for i, r in enumerate(requests)]
    quotas = spread_quota(allowance, pairs)
    total = sum(requests)
    assert allowance <= sum(quotas.values()) <= allowance + MIN_QUOTA * len(requests)
    for cid, request in pairs:
        exact = allowance * request // total
        assert quotas[cid] == MIN_QUOTA if exact + 1 < MIN_QUOTA else exact <= quotas[cid] <= exact + 1
