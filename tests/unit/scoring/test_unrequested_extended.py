"""Kubernetes v1.30 leaves a scalar (extended) resource the pod does not request out of scoring; eru does the same.

Each expected value is derived by hand in the comments from the v1.30 formulas (docs/fairness-and-scoring.md).
"""

from __future__ import annotations

import numpy as np

from eru.planning.scorers import ScoreState, balanced_allocation, least_allocated, most_allocated


def _state(allocatable: list[int], requested: list[int], request: list[int]) -> ScoreState:
    return ScoreState(
        resources=("cpu", "memory", "example.com/ext"),
        allocatable=np.array([allocatable], dtype=np.int64),
        requested=np.array([requested], dtype=np.int64),
        request=np.array([request], dtype=np.int64),
        resource_weights=np.ones(3, dtype=np.int64),
        qos_counts=np.zeros((1, 3), dtype=np.int64),
        qos_class=None,
    )


IDLE = _state([6000, 10000, 4], [0, 0, 0], [3000, 5000, 0])


def test_least_allocated_skips_the_unrequested_extended_resource() -> None:
    # cpu (6000 − 3000)·100 // 6000 = 50, memory (10000 − 5000)·100 // 10000 = 50; ext left out → (50 + 50) // 2 = 50
    # (scoring ext would add (4 − 0)·100 // 4 = 100 → 200 // 3 = 66)
    assert least_allocated(IDLE).tolist() == [50.0]


def test_most_allocated_skips_the_unrequested_extended_resource() -> None:
    # cpu (1000 + 2000)·100 // 6000 = 50, memory (2000 + 3000)·100 // 10000 = 50; ext left out → 50
    # (scoring the idle ext would add 0·100 // 4 = 0 → (50 + 50 + 0) // 3 = 33)
    state = _state([6000, 10000, 4], [1000, 2000, 0], [2000, 3000, 0])
    assert most_allocated(state).tolist() == [50.0]


def test_balanced_allocation_skips_the_unrequested_extended_resource() -> None:
    # fractions cpu 3000/6000 = 0.5, memory 5000/10000 = 0.5 → std 0 → 100; with ext (0/4 = 0) the three fractions
    # 0.5, 0.5, 0 have mean 1/3, population std √((1/36 + 1/36 + 1/9) / 3) = √(1/18) ≈ 0.2357 → int(76.43) = 76
    assert balanced_allocation(IDLE).tolist() == [100.0]


def test_a_requested_extended_resource_is_scored() -> None:
    # the pod asks for 1 of ext: cpu 50, memory 50, ext (4 − 1)·100 // 4 = 75 → (50 + 50 + 75) // 3 = 58
    state = _state([6000, 10000, 4], [0, 0, 0], [3000, 5000, 1])
    assert least_allocated(state).tolist() == [58.0]
    # most: 50, 50, 1·100 // 4 = 25 → 125 // 3 = 41
    assert most_allocated(state).tolist() == [41.0]


def test_cpu_and_memory_are_scored_even_when_not_requested() -> None:
    # native resources stay in: request {cpu 0, memory 5000}: cpu (6000 − 0)·100 // 6000 = 100, memory 50 → 75
    state = _state([6000, 10000, 4], [0, 0, 0], [0, 5000, 0])
    assert least_allocated(state).tolist() == [75.0]


def test_a_node_without_the_extended_resource_scores_the_same() -> None:
    # the ext column no longer moves the score: a node with 0 ext and one with 4 idle ext both score 50
    state = ScoreState(
        resources=("cpu", "memory", "example.com/ext"),
        allocatable=np.array([[6000, 10000, 4], [6000, 10000, 0]], dtype=np.int64),
        requested=np.zeros((2, 3), dtype=np.int64),
        request=np.array([[3000, 5000, 0]] * 2, dtype=np.int64),
        resource_weights=np.ones(3, dtype=np.int64),
        qos_counts=np.zeros((2, 3), dtype=np.int64),
        qos_class=None,
    )
    assert least_allocated(state).tolist() == [50.0, 50.0]
