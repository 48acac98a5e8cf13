"""`eru up`'s sim nodes sample metrics every 2 s (a lively demo) until the stack's nodes would send more than 200
samples a second together; then each node samples less often (docs/replicas.md)."""

from __future__ import annotations

from eru.stack.launch import sim_metrics_interval


def test_the_sample_rate_of_a_big_sim_stack_is_bounded() -> None:
    assert [sim_metrics_interval(n) for n in (1, 16, 400, 1000, 5000)] == [2.0, 2.0, 2.0, 5.0, 25.0]
    assert all(n / sim_metrics_interval(n) <= 200 + 1e-9 for n in range(1, 10_001, 37))
