"""The scorers' formulas written out per node in plain Python, as the Kubernetes v1.30 Go code states them."""

from __future__ import annotations

import math


def least_formula(
    requested: list[int], allocatable: list[int], weights: list[int], scored: list[bool] | None = None
) -> int:
    """`scored[i]` False: a scalar resource the pod does not request (v1.30 returns allocatable 0 for it)."""
    node_score = weight_sum = 0
    for req, cap, weight, keep in zip(requested, allocatable, weights, scored or [True] * len(weights), strict=True):
        if cap == 0 or not keep:
            continue
        score = 0 if req > cap else (cap - req) * 100 // cap
        node_score += score * weight
        weight_sum += weight
    return 0 if weight_sum == 0 else node_score // weight_sum


def most_formula(
    requested: list[int], allocatable: list[int], weights: list[int], scored: list[bool] | None = None
) -> int:
    node_score = weight_sum = 0
    for req, cap, weight, keep in zip(requested, allocatable, weights, scored or [True] * len(weights), strict=True):
        if cap == 0 or not keep:
            continue
        node_score += min(req, cap) * 100 // cap * weight
        weight_sum += weight
    return 0 if weight_sum == 0 else node_score // weight_sum


def balanced_formula(requested: list[int], allocatable: list[int], scored: list[bool] | None = None) -> int:
    keep = scored or [True] * len(requested)
    fractions = [
        min(req / cap, 1.0) for req, cap, k in zip(requested, allocatable, keep, strict=True) if cap != 0 and k
    ]
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        std = math.sqrt(sum((f - mean) * (f - mean) for f in fractions) / len(fractions))
    return int((1 - std) * 100)


def qos_formula(counts: list[list[int]], node: int, cls: int) -> float:
    """10 · |1 − (Pn − Pc)| scaled × 5 (docs/fairness-and-scoring.md)."""
    cluster_total = sum(map(sum, counts))
    pc = sum(row[cls] for row in counts) / cluster_total if cluster_total else 0.0
    row = counts[node]
    pn = row[cls] / sum(row) if sum(row) else 0.0
    return 10.0 * abs(1.0 - (pn - pc)) * 5.0
