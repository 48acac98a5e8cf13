"""Pacing a shared intake by the work a replica finds there (eru.bus.intake_pace, docs/replicas.md)."""

from __future__ import annotations

from eru.bus.intake_pace import CAP_SECONDS, FLOOR_SECONDS, Pace, next_pace


def test_a_fresh_replica_asks_for_one_at_once() -> None:
    pace = Pace.start()
    assert (pace.batch, pace.delay) == (1, 0.0)
    assert pace.size(64) == 1


def test_only_routed_work_backs_off_doubling_to_the_cap_one_at_a_time() -> None:
    pace = Pace.start()
    delays = []
    for _ in range(8):
        pace = next_pace(pace, 0, 5)
        delays.append(pace.delay)
        assert pace.size(64) == 1
    assert delays == [FLOOR_SECONDS, 0.1, 0.2, 0.4, 0.8, CAP_SECONDS, CAP_SECONDS, CAP_SECONDS]


def test_any_own_work_means_full_batches_at_once() -> None:
    slow = Pace(batch=1, delay=CAP_SECONDS)
    fast = next_pace(slow, 1, 63)  # one of 64 was its own: it is an owner of busy work
    assert fast == Pace(batch=0, delay=0.0)
    assert fast.size(64) == 64
    assert fast.size(7) == 7  # never more than the free handler slots


def test_nothing_decided_keeps_the_pace() -> None:
    for pace in (Pace.start(), Pace(batch=1, delay=0.4), Pace(batch=0, delay=0.0)):
        assert next_pace(pace, 0, 0) == pace


def test_an_owner_that_starts_routing_slows_down_from_the_floor() -> None:
    owner = next_pace(Pace.start(), 3, 0)
    assert next_pace(owner, 0, 2) == Pace(batch=1, delay=FLOOR_SECONDS)
