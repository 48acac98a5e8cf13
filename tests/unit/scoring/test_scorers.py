"""The scorers against their formulas written out per node in plain Python (Kubernetes v1.30;
docs/fairness-and-scoring.md)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scoring_formulas import balanced_formula, least_formula, most_formula

from eru.planning.scorers import (
    QOS_CLASSES,
    ScoreState,
    balanced_allocation,
    least_allocated,
    most_allocated,
    qos_balance,
    qos_class,
    raw_qos_scores,
)

PROPERTIES = settings(max_examples=120, deadline=None)


@st.composite
def states(draw: st.DrawFn, resources: int | None = None) -> tuple[ScoreState, list[list[int]], list[list[int]]]:
    width = resources or draw(st.integers(1, 4))
    nodes = draw(st.integers(1, 6))
    amount = st.integers(0, 10**12)
    allocatable = [[draw(st.one_of(st.just(0), amount)) for _ in range(width)] for _ in range(nodes)]
    requested = [[draw(amount) for _ in range(width)] for _ in range(nodes)]
    request = [draw(st.integers(0, 10**10)) for _ in range(width)]
    weights = [draw(st.integers(0, 5)) for _ in range(width)]
    qos = [[draw(st.integers(0, 30)) for _ in QOS_CLASSES] for _ in range(nodes)]
    state = ScoreState(
        resources=tuple(f"r{i}" for i in range(width)),
        allocatable=np.array(allocatable, dtype=np.int64),
        requested=np.array(requested, dtype=np.int64),
        request=np.tile(np.array(request, dtype=np.int64), (nodes, 1)),
        resource_weights=np.array(weights, dtype=np.int64),
        qos_counts=np.array(qos, dtype=np.int64),
        qos_class=draw(st.integers(0, 2)),
    )
    after = [[r + q for r, q in zip(row, request, strict=True)] for row in requested]
    return state, after, allocatable


def _requested(state: ScoreState) -> list[bool]:
    # the drawn resources are named r0..r3: scalar resources, scored only when the instance requests them
    return [int(amount) != 0 for amount in state.request[0]] if len(state.request) else []


@PROPERTIES
@given(states())
def test_least_allocated_matches_kubernetes(drawn: tuple[ScoreState, list[list[int]], list[list[int]]]) -> None:
    state, after, allocatable = drawn
    weights = state.resource_weights.tolist()
    scored = _requested(state)
    expected = [least_formula(r, a, weights, scored) for r, a in zip(after, allocatable, strict=True)]
    assert least_allocated(state).tolist() == expected


@PROPERTIES
@given(states())
def test_most_allocated_matches_kubernetes(drawn: tuple[ScoreState, list[list[int]], list[list[int]]]) -> None:
    state, after, allocatable = drawn
    weights = state.resource_weights.tolist()
    scored = _requested(state)
    expected = [most_formula(r, a, weights, scored) for r, a in zip(after, allocatable, strict=True)]
    assert most_allocated(state).tolist() == expected


@PROPERTIES
@given(st.one_of(states(), states(resources=2)))
def test_balanced_allocation_matches_kubernetes(drawn: tuple[ScoreState, list[list[int]], list[list[int]]]) -> None:
    state, after, allocatable = drawn
    expected = [balanced_formula(r, a, _requested(state)) for r, a in zip(after, allocatable, strict=True)]
    assert balanced_allocation(state).tolist() == expected


@PROPERTIES
@given(states())
def test_qos_balance_matches_the_seed_formula(drawn: tuple[ScoreState, list[list[int]], list[list[int]]]) -> None:
    state, _, _ = drawn
    counts = state.qos_counts.tolist()
    cls = state.qos_class
    assert cls is not None
    cluster_total = sum(map(sum, counts))
    pc = sum(row[cls] for row in counts) / cluster_total if cluster_total else 0.0
    for node, row in enumerate(counts):
        pn = row[cls] / sum(row) if sum(row) else 0.0
        raw = 10 * abs(1 - (pn - pc))
        assert raw_qos_scores(state)[node] == pytest.approx(raw, abs=1e-12)
        assert 0 <= raw <= 20
        assert qos_balance(state)[node] == pytest.approx(raw * 5, abs=1e-9)


def test_qos_balance_prefers_the_node_short_of_the_class() -> None:
    state = ScoreState(
        resources=("cpu",),
        allocatable=np.ones((2, 1), dtype=np.int64),
        requested=np.zeros((2, 1), dtype=np.int64),
        request=np.zeros((2, 1), dtype=np.int64),
        resource_weights=np.ones(1, dtype=np.int64),
        qos_counts=np.array([[4, 0, 0], [0, 4, 0]], dtype=np.int64),
        qos_class=0,
    )
    # Pc = 0.5; node 0 Pn = 1 → 10·|1 − 0.5| = 5; node 1 Pn = 0 → 10·1.5 = 15.
    assert raw_qos_scores(state).tolist() == [5.0, 15.0]


@pytest.mark.parametrize(
    ("cpu_request", "cpu_limit", "memory_request", "memory_limit", "expected"),
    [
        (1, 1, 100, 100, "Guaranteed"),
        (1, 2, 100, 100, "Burstable"),
        (1, 1, 100, 0, "Burstable"),
        (0, 0, 100, 0, "Burstable"),
        (0, 0, 0, 0, "BestEffort"),
    ],
)
def test_qos_class_follows_kubernetes(
    cpu_request: float, cpu_limit: float, memory_request: int, memory_limit: int, expected: str
) -> None:
    assert qos_class(cpu_request, cpu_limit, memory_request, memory_limit) == expected
