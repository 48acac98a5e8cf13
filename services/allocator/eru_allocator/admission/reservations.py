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

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import structlog

from eru.domain import ResourceRequest
from eru.errors import InvalidInput
from eru.fairness.ledger import parent_of
from eru.planning import PlanningConfig, normalize_request
from eru.planning.reservations import Amount
from eru.store.transaction import Connection
from eru.units import cpu_to_pieces

log = structlog.get_logger()

RESERVATIONS_SQL = """
SELECT r.tenant, r.node, r.cpu, r.memory, n.share_base FROM tenant_reservations r JOIN nodes n ON n.name = r.node
 WHERE n.pod = $1
"""
HELD_BY_NODE_SQL = """
SELECT tenant, node, resources, count(*) AS n FROM containers
 WHERE pod = $1 AND state NOT IN ('removed', 'failed', 'lost') AND replaces IS NULL
 GROUP BY tenant, node, resources
"""


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def instance_amount(resources: Any, config: PlanningConfig) -> Amount | None:
    """What one container with the stored requirement holds on its node (bound CPU pieces, memory bytes)."""
    try:
        need = normalize_request(ResourceRequest.model_validate(_loads(resources)), config, "resources")
    except (InvalidInput, ValueError):
        return None  # a record from an older model: not counted
    return Amount(need.cpu_request if need.cpu_bind else 0, need.memory_request)


@dataclass
class Fairness:
    """A pod's reservations (node → top-level tenant → amount) and, per (top-level tenant, node), what the tenant's
    live containers hold there."""

    reservations: dict[str, dict[str, Amount]] = field(default_factory=dict)
    held: dict[tuple[str, str], Amount] = field(default_factory=dict)


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


async def load(conn: Connection, pod: str, config: PlanningConfig) -> Fairness:
    """The pod's reservations and what each tenant holds per node (only read when the pod has reservations)."""
    return await from_rows(conn, pod, await conn.fetch(RESERVATIONS_SQL, pod), config)


async def from_rows(conn: Connection, pod: str, rows: Iterable[Any], config: PlanningConfig) -> Fairness:
    """`load` from the pod's reservation rows read already (tenant, node, cpu, memory): what each tenant holds per
    node is read only when there are any."""
    fairness = Fairness()
    for row in rows:
        pieces = cpu_to_pieces(str(row["cpu"]), config.share_base, "cpu")
        fairness.reservations.setdefault(row["node"], {})[row["tenant"]] = Amount(pieces, int(row["memory"]))
    if fairness.reservations:
        for row in await conn.fetch(HELD_BY_NODE_SQL, pod):
            amount = instance_amount(row["resources"], config)
            if amount is not None:
                key = (parent_of(row["tenant"]), row["node"])
                total = Amount(amount.cpu * int(row["n"]), amount.memory * int(row["n"]))
                fairness.held[key] = fairness.held.get(key, Amount()).plus(total)
    return fairness
