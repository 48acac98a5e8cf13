"""least-allocated, most-allocated and balanced-allocation: Kubernetes' formulas, as of v1.30
(pkg/scheduler/framework/plugins/noderesources: least_allocated.go, most_allocated.go, balanced_allocation.go; the same
since the scoring strategies were introduced in v1.22 and balanced allocation went to the standard deviation in v1.24).

For each node, with `requested` including the incoming instance and `allocatable` the node's amount of a resource:

* least-allocated: per resource `(allocatable − requested) · 100 // allocatable` (0 when allocatable is 0 or
  requested exceeds it); node score = Σ score_r · w_r // Σ w_r over resources with allocatable > 0 (integer division,
  as Go's int64).
* most-allocated: per resource `min(requested, allocatable) · 100 // allocatable`, combined the same way.
* balanced-allocation: fractions f_r = min(requested / allocatable, 1) over resources with allocatable > 0; std =
  |f₁ − f₂| / 2 for two resources, the population standard deviation for more, 0 for one; score = int((1 − std) · 100).

A scalar (extended) resource the incoming instance does not request — any name but cpu, memory, ephemeral-storage
and the fallback's "primary", with a request of 0 — is left out of all three, as v1.30 does
(`resource_allocation.go`: `calculateResourceAllocatableRequest` returns 0, 0 for it, then the zero allocatable is
skipped). Example: node {cpu 6000, memory 10000, example.com/ext 4}, nothing allocated, request {cpu 3000, memory
5000}: least-allocated = (50 + 50) // 2 = 50, not (50 + 50 + 100) // 3 = 66.

Kubernetes scores pods without requests with non-zero defaults (0.1 CPU, 200 MiB); eru scores the request as given.
"""

from __future__ import annotations

import numpy as np

from eru.planning.scorers.base import MAX_NODE_SCORE, BoolArray, FloatArray, IntArray, ScoreState, register_scorer


def _weighted_integer_mean(per_resource: IntArray, counted: BoolArray, weights: IntArray) -> FloatArray:
    weight = np.where(counted, weights, 0)
    total = (per_resource * weight).sum(axis=1)
    weight_sum = weight.sum(axis=1)
    safe = np.where(weight_sum == 0, 1, weight_sum)
    result: FloatArray = np.where(weight_sum == 0, 0, total // safe).astype(np.float64)
    return result


@register_scorer("least-allocated")
def least_allocated(state: ScoreState) -> FloatArray:
    """Kubernetes LeastAllocated: favour nodes with more left after the instance."""
    requested = state.requested + state.request
    allocatable = state.allocatable
    safe = np.where(allocatable == 0, 1, allocatable)
    per_resource = np.where(
        (allocatable == 0) | (requested > allocatable), 0, (allocatable - requested) * MAX_NODE_SCORE // safe
    )
    return _weighted_integer_mean(per_resource, state.counted(), state.resource_weights)


@register_scorer("most-allocated")
def most_allocated(state: ScoreState) -> FloatArray:
    """Kubernetes MostAllocated: favour the fullest nodes (bin packing)."""
    requested = np.minimum(state.requested + state.request, state.allocatable)
    allocatable = state.allocatable
    safe = np.where(allocatable == 0, 1, allocatable)
    per_resource = np.where(allocatable == 0, 0, requested * MAX_NODE_SCORE // safe)
    return _weighted_integer_mean(per_resource, state.counted(), state.resource_weights)


@register_scorer("balanced-allocation")
def balanced_allocation(state: ScoreState) -> FloatArray:
    """Kubernetes BalancedAllocation: favour nodes whose resources end up equally used."""
    requested = (state.requested + state.request).astype(np.float64)
    allocatable = state.allocatable
    counted = state.counted()
    fraction = np.minimum(requested / np.where(counted, allocatable, 1).astype(np.float64), 1.0)
    fraction = np.where(counted, fraction, 0.0)
    n = counted.sum(axis=1)
    if state.resources and np.all(n == 2) and counted.shape[1] == 2:
        std = np.abs((fraction[:, 0] - fraction[:, 1]) / 2)
    else:
        std = np.zeros(allocatable.shape[0])
        for row in np.flatnonzero(n >= 2):
            values = fraction[row][counted[row]]
            if values.size == 2:
                std[row] = abs((values[0] - values[1]) / 2)
            else:
                mean = values.sum() / values.size
                std[row] = np.sqrt(((values - mean) ** 2).sum() / values.size)
    result: FloatArray = np.trunc((1 - std) * MAX_NODE_SCORE)
    return result
