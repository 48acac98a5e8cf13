"""Spreading a node's batch CPU allowance over its batch containers as CFS quotas (docs/colocation.md suppress)."""

from __future__ import annotations

from collections.abc import Sequence

# The kernel refuses a CFS quota under 1 ms per period; 0.01 core of a 100 ms period is the smallest we hand out.
MIN_QUOTA = 10_000


def spread_quota(allowance: int, requests: Sequence[tuple[str, int]]) -> dict[str, int]:
    """Micro-cores of quota per container, proportional to its CPU request (equal shares when no one requests).

    Shares are floored and the remainder goes one micro-core at a time to the largest remainders (ties by id), so the
    quotas add up to the allowance exactly unless the per-container minimum lifts them.
    """
    if not requests:
        return {}
    total = sum(max(0, request) for _, request in requests)
    weights = [(cid, max(0, request) if total else 1) for cid, request in requests]
    weight_sum = sum(w for _, w in weights)
    allowance = max(0, allowance)
    shares = {cid: allowance * w // weight_sum for cid, w in weights}
    left = allowance - sum(shares.values())
    by_remainder = sorted(weights, key=lambda item: (-(allowance * item[1] % weight_sum), item[0]))
    for cid, _ in by_remainder[:left]:
        shares[cid] += 1
    return {cid: max(MIN_QUOTA, share) for cid, share in shares.items()}
