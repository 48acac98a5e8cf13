"""Tenants in the allocator (docs/fairness-and-scoring.md): the tenant operations and the accounting DRF needs.

What a tenant holds in a pod is what its live containers request (docs/planning.md normalised requests: CPU in
cores, bound or not, memory in bytes), and a request's demand is counted the same way: limits, quota and DRF shares
are promises about what a tenant requests. What a request takes from the pod's free resources is what nodes reserve
(bound cores, memory: a memory-prime instance's CPU may be oversold on a node), so capacity and headroom count that;
the pod's totals are its schedulable nodes' capacity. Quota and limit apply per pod: the pod lock makes a limit check
exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction

import structlog

from eru.errors import InvalidInput, PlanningFailure
from eru.fairness import TenantUsage
from eru.planning import NodeResources, NormalizedRequest, PlanningConfig
from eru.planning.snapshot import instance_demand as snapshot_demand
from eru.planning.snapshot import instance_reserves
from eru.store.transaction import Connection
from eru_allocator.store.accounting import add_held, held, load_tenant, load_tenants, row_tenant

__all__ = [  # what live containers hold and the tenants configured are read in eru_allocator.store.accounting
    "DEFAULT_TENANT",
    "add_held",
    "check_growth_within_limits",
    "held",
    "held_in_pods",
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


# ------------------------------------------------------------------------------------------------- realloc guard
async def held_in_pods(
    conn: Connection, pods: Iterable[str], config: PlanningConfig
) -> dict[str, dict[str, TenantUsage]]:
    """Per pod, per tenant: what is held now (under the pods' locks: taken before a realloc changes anything)."""
    return {pod: await held(conn, pod, config) for pod in pods}


async def check_growth_within_limits(
    conn: Connection, before: Mapping[str, Mapping[str, TenantUsage]], config: PlanningConfig
) -> None:
    """After a realloc's changes (same transaction): `PlanningFailure` (`tenant_limit`) when a tenant grew above its
    limit on some resource in some pod; raising rolls the whole realloc back. A tenant already over a lowered limit
    may still shrink."""
    tenants = await load_tenants(conn)
    for pod, previous in before.items():
        for name, usage in (await held(conn, pod, config)).items():
            tenant = tenants.get(name)
            if tenant is None or not tenant.limit:
                continue
            old = previous.get(name, TenantUsage()).allocated
            for resource, cap in tenant.limit.items():
                after, was = usage.allocated.get(resource, Fraction(0)), old.get(resource, Fraction(0))
                if after > cap and after > was:
                    raise PlanningFailure(
                        f"tenant {name!r} would exceed its limit in pod {pod!r} ({resource}: has {float(was):g}, "
                        f"needs {float(after - was):g} more, limit {float(cap):g})",
                        code="tenant_limit",
                        tenant=name,
                        pod=pod,
                        resources={
                            resource: {"limit": float(cap), "allocated": float(was), "need": float(after - was)}
                        },
                    )
