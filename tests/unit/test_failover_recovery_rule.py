"""The rule that says when answers flow again after a NATS server is killed (`recovered_at`, docs/deploy.md
"Failover, measured"). CI once saw an election of ~10 s after which the backlog was answered in 2 s: answers per
second after the kill 0 ×10, 396, 203, 50, then the 95 % point. The old rule counted only answers before that point,
found no 5 s window there and said "never recovered"."""

from __future__ import annotations

from eru.testing.cluster_failover import WINDOW, recovered_at


def _answers(per_second: list[int], start: float) -> list[float]:
    """Answer times spread evenly within each second, from `start`."""
    return [start + second + (k + 0.5) / count for second, count in enumerate(per_second) for k in range(count)]


def test_a_backlog_cleared_in_a_burst_after_a_long_election_is_a_recovery() -> None:
    killed_at = 100.0
    # the CI run's figures: ten silent seconds, then the backlog, then the last stragglers at the steady rate
    times = _answers([0] * 10 + [396, 203, 50, 50], killed_at)
    until = times[int(len(times) * 0.95)]  # as deploy_through_a_failover cuts: the load tails off after it
    back = recovered_at(times, killed_at, until, steady=50.0)
    assert back is not None
    assert 10.0 <= back < 10.01


def test_a_trickle_is_not_a_recovery() -> None:
    killed_at = 0.0
    # 5 answers a second after a pause, a tenth of the steady rate, while hundreds are still to come
    times = _answers([0] * 3 + [5] * 80, killed_at)
    assert recovered_at(times, killed_at, times[int(len(times) * 0.95)], steady=50.0) is None


def test_the_first_answer_of_a_steady_flow_is_the_recovery() -> None:
    killed_at = 0.0
    times = _answers([0, 0, 0, 0, 0, 0, 50, 50, 50, 50, 50, 50, 50, 50], killed_at)
    back = recovered_at(times, killed_at, times[int(len(times) * 0.95)], steady=50.0)
    assert back is not None
    assert 6.0 <= back < 6.02
    assert WINDOW == 5.0  # the figures above are sized for a 5 s window


def test_answers_of_batches_under_way_at_the_kill_are_not_a_recovery() -> None:
    killed_at = 0.0
    # 5 answers just after the kill (batches already committed), 4 s of silence, then the backlog: the first window
    # (0–5 s) holds 159 answers, but the flow came back at the end of the silence
    times = _answers([5, 0, 0, 0, 154, 142, 48, 51, 49, 50, 50, 53, 44], killed_at)
    back = recovered_at(times, killed_at, times[int(len(times) * 0.95)], steady=50.0)
    assert back is not None
    assert 4.0 <= back < 4.01
