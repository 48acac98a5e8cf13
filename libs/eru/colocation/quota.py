"""Spreading a node's batch CPU allowance over its batch containers as CFS quotas (docs/colocation.md suppress).

Each container has a *cap*: the CPU it could use unsuppressed (its own `cpu_limit`, the cores of its cpuset when it
is bound, else the whole node). A suppressed quota never exceeds the cap; what a capped container cannot take is
spread again over the others below their caps (water-filling), so the quotas add up to min(allowance, Σ caps).
"""

from __future__ import annotations

from collections.abc import Sequence

MICRO = 1_000_000
# The kernel refuses a CFS quota under 1 ms per period; 0.01 core of a 100 ms period is the smallest we hand out.
MIN_QUOTA = 10_000


def cpu_cap(cpu_limit: int, cpu_cores: int, node_cpu: int) -> int:
    """Micro-cores a container could use unsuppressed: the cores of its cpuset when bound (`cpu_cores` > 0), else
    its `cpu_limit` when it has one, else the node; never more than the node."""
    if cpu_cores > 0:
        return min(node_cpu, cpu_cores * MICRO)
    if cpu_limit > 0:
        return min(node_cpu, cpu_limit)
    return node_cpu


def _proportional(allowance: int, weights: Sequence[tuple[str, int]]) -> dict[str, int]:
    """`allowance` split by weight, floored, the remainder one micro-core at a time to the largest remainders (ties
    by id): the shares add up to `allowance` exactly."""
    weight_sum = sum(w for _, w in weights)
    shares = {cid: allowance * w // weight_sum for cid, w in weights}
    left = allowance - sum(shares.values())
    by_remainder = sorted(weights, key=lambda item: (-(allowance * item[1] % weight_sum), item[0]))
    for cid, _ in by_remainder[:left]:
        shares[cid] += 1
    return shares


def spread_quota(allowance: int, containers: Sequence[tuple[str, int, int]]) -> dict[str, int]:
    """Micro-cores of quota per container `(id, cpu request, cap)`: proportional to the request (equal shares when no
    one requests), never above the container's cap, the excess of capped containers spread again over the others.

    Deterministic (integer arithmetic, ties by id). The per-container minimum (`MIN_QUOTA`, the kernel's floor) lifts
    a share below it, but never above the container's own cap.
    """
    if not containers:
        return {}
    allowance = max(0, allowance)
    caps = {cid: max(0, cap) for cid, _, cap in containers}
    requests = {cid: max(0, request) for cid, request, _ in containers}
    quotas: dict[str, int] = {}
    open_ids = [cid for cid, _, _ in containers]
    left = allowance
    while open_ids and left > 0:
        total = sum(requests[cid] for cid in open_ids)
        weights = [(cid, requests[cid] if total else 1) for cid in open_ids]
        shares = _proportional(left, weights)
        capped = [cid for cid in open_ids if shares[cid] >= caps[cid]]
        if not capped:
            quotas.update(shares)
            left = 0
            break
        for cid in capped:  # fill these to their caps, then spread what remains over the rest
            quotas[cid] = caps[cid]
            left -= caps[cid]
        open_ids = [cid for cid in open_ids if cid not in capped]
    for cid in open_ids:
        quotas.setdefault(cid, 0)
    return {cid: min(caps[cid], max(MIN_QUOTA, quotas[cid])) for cid, _, _ in containers}
