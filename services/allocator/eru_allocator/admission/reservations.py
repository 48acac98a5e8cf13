"""Per-node reservations of tenants in the allocator (docs/fairness-and-scoring.md).

`eru.allocator.tenant-reserve|tenant-unreserve|tenant-reservations` manage the `tenant_reservations` table
(migration 0035). Deploys see a pod's reservations in the batch's `ClusterSnapshot` (`load`, once per batch or
admission pass under the pod lock): what each tenant reserved on each node and what its live containers hold there.
The decisions
themselves are pure: `eru.planning.reservations.withheld_for` / `withhold` (what a request may not use, recorded as
`"withheld"` in the deploy decision) and `eru.fairness.Ledger` (quota headroom, with reservations counting toward
quota).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import structlog

from eru.planning import PlanningConfig
from eru.planning.reservations import Amount
from eru_allocator.store.reservations import Fairness, from_rows, instance_amount, load

log = structlog.get_logger()

__all__ = ["Fairness", "from_rows", "instance_amount", "load", "tenant_totals"]  # read in eru_allocator.store


def tenant_totals(
    reservations: Mapping[str, Mapping[str, Amount]], held: Mapping[tuple[str, str], Amount], config: PlanningConfig
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per tenant: reserved in the pod and the part its containers use (cores, bytes as `Fraction`s). A batch passes
    its snapshot's, whose holdings include the requests planned earlier in the batch."""
    reserved: dict[str, dict[str, Fraction]] = {}
    used: dict[str, dict[str, Fraction]] = {}
    for node, per_tenant in reservations.items():
        for tenant, amount in per_tenant.items():
            in_use = amount.used_by(held.get((tenant, node), Amount()))
            _add(reserved.setdefault(tenant, {}), amount, config)
            _add(used.setdefault(tenant, {}), in_use, config)
    return reserved, used


def _add(target: dict[str, Fraction], amount: Amount, config: PlanningConfig) -> None:
    target["cpu"] = target.get("cpu", Fraction(0)) + Fraction(amount.cpu, config.share_base)
    target["memory"] = target.get("memory", Fraction(0)) + Fraction(amount.memory)
