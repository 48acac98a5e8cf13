"""The sliding window: running sums equal a recomputation under duplicates, out-of-order and stale samples."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from eru.colocation.window import SlidingWindow, WindowPoint


def point(time: float, value: int = 1) -> WindowPoint:
    return WindowPoint(time, value, value * 2, value * 3, value * 4)


def test_duplicate_time_counts_once_and_first_wins() -> None:
    window = SlidingWindow(300, 5)
    assert window.add(point(10, 5))
    assert not window.add(point(10, 7))
    stats = window.stats(10)
    assert (stats.count, stats.node_cpu) == (1, 5)
    assert window.duplicates == 1


def test_out_of_order_sample_inside_the_window_is_inserted_in_time_order() -> None:
    window = SlidingWindow(300, 5)
    for t in (10, 20, 15):
        window.add(point(t))
    assert [p.time for p in window.points()] == [10, 15, 20]
    assert window.late == 1
    assert window.newest is not None
    assert window.newest.time == 20


def test_sample_older_than_the_window_is_dropped_on_arrival() -> None:
    window = SlidingWindow(300, 5)
    window.add(point(400))
    assert not window.add(point(100))  # 400 - 300 = 100: at the edge, already outside
    assert window.add(point(100.5))
    assert window.dropped == 1


def test_samples_leave_as_now_advances() -> None:
    window = SlidingWindow(10, 1)
    for t in range(10):
        window.add(point(float(t), t))
    assert window.stats(9).count == 10
    stats = window.stats(15)  # keeps 6..9
    assert (stats.count, stats.node_cpu) == (4, 6 + 7 + 8 + 9)


def test_coverage_is_a_third_of_the_expected_samples() -> None:
    window = SlidingWindow(30, 1)
    for t in range(9):
        window.add(point(float(t)))
    assert not window.stats(8).covered
    window.add(point(9.0))
    assert window.stats(9).covered
    assert not SlidingWindow(30, 1).stats(0).covered


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=400), st.integers(min_value=0, max_value=10**9)),
        max_size=80,
    ),
    st.integers(min_value=0, max_value=100),
)
def test_running_sums_equal_a_recomputation(arrivals: list[tuple[int, int]], extra: int) -> None:
    window_seconds = 60.0
    window = SlidingWindow(window_seconds, 5)
    accepted: dict[float, int] = {}
    newest = None
    for time, value in arrivals:
        t = float(time)
        duplicate = t in accepted and t > (newest if newest is not None else t) - window_seconds
        too_old = newest is not None and t <= newest - window_seconds
        added = window.add(point(t, value))
        assert added == (not duplicate and not too_old)
        if added:
            accepted[t] = value
            newest = t if newest is None else max(newest, t)
        accepted = {k: v for k, v in accepted.items() if newest is None or k > newest - window_seconds}
    now = (newest or 0.0) + extra
    expected = {k: v for k, v in accepted.items() if now - window_seconds < k <= now}
    stats = window.stats(now)
    assert stats.count == len(expected)
    assert stats.node_cpu == sum(expected.values())
    assert stats.batch_allowed == 4 * sum(expected.values())
    assert [p.time for p in window.points()] == sorted(expected)
