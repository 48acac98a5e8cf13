"""Tenants in the allocator (docs/fairness-and-scoring.md): the tenant operations and the accounting DRF needs.

What a tenant holds in a pod is what its live containers request (docs/planning.md normalised requests: CPU in
cores, bound or not, memory in bytes), and a request's demand is counted the same way: limits, quota and DRF shares
are promises about what a tenant requests. What a request takes from the pod's free resources is what nodes reserve
(bound cores, memory: a memory-prime instance's CPU may be oversold on a node), so capacity and headroom count that;
the pod's totals are its schedulable nodes' capacity. Quota and limit apply per pod: the pod lock makes a limit check
exact.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

import structlog

from eru.errors import InvalidInput
from eru.planning import NodeResources, NormalizedRequest, PlanningConfig
from eru.planning.snapshot import instance_demand as snapshot_demand
from eru.planning.snapshot import instance_reserves
from eru_allocator.store.accounting import add_held, held, load_tenant, load_tenants, row_tenant

__all__ = [  # what live containers hold and the tenants configured are read in eru_allocator.store.accounting
    "DEFAULT_TENANT",
    "add_held",
    "held",
    "instance_demand",
    "load_tenant",
    "load_tenants",
    "pod_totals",
    "request_demand",
    "request_reserves",
    "row_tenant",
    "unknown_tenant",
]

log = structlog.get_logger()

DEFAULT_TENANT = "default"


def instance_demand(normalized: NormalizedRequest, config: PlanningConfig) -> dict[str, Fraction]:
    """What one instance requests, counted against its tenant (`eru.planning.snapshot.instance_demand`)."""
    return snapshot_demand(normalized, config.share_base)


def request_demand(normalized: NormalizedRequest, count: int, config: PlanningConfig) -> dict[str, Fraction]:
    """A whole request's demand (`count` instances): what its tenant is charged."""
    return {name: amount * count for name, amount in instance_demand(normalized, config).items()}


def request_reserves(normalized: NormalizedRequest, count: int, config: PlanningConfig) -> dict[str, Fraction]:
    """What a whole request (`count` instances) takes from the pod's free resources: bound cores, memory."""
    return {name: amount * count for name, amount in instance_reserves(normalized, config.share_base).items()}


def pod_totals(
    nodes: Iterable[NodeResources], config: PlanningConfig
) -> tuple[dict[str, Fraction], dict[str, Fraction]]:
    """The pod's total and free resources over its schedulable nodes: cores and memory bytes."""
    cpu = used_cpu = memory = used_memory = 0
    for node in nodes:
        cpu += sum(node.cpu_map.values())
        used_cpu += sum(min(node.used_cpu_map.get(core, 0), pieces) for core, pieces in node.cpu_map.items())
        memory += node.memory
        used_memory += min(node.used_memory, node.memory)
    totals = {"cpu": Fraction(cpu, config.share_base), "memory": Fraction(memory)}
    free = {"cpu": Fraction(cpu - used_cpu, config.share_base), "memory": Fraction(memory - used_memory)}
    return totals, free


def unknown_tenant(name: str, known: Iterable[str]) -> InvalidInput:
    """The error for a workload of a tenant nobody created."""
    names = sorted(known)[:20]
    return InvalidInput(
        "workload.tenant",
        f"unknown tenant {name!r} (create it with `eru tenant create`; known: {', '.join(names) or 'none'})",
    )
