"""A metrics sample from measured usage and what the labels say about each container (pure)."""

from __future__ import annotations

from collections.abc import Mapping

from eru.domain.messages import ContainerMetrics, NodeMetrics
from eru_node_agent.runtime.base import NodeUsage
from eru_node_agent.state import Known


def build_sample(
    node: str, now: float, usage: NodeUsage, known: Mapping[str, Known], *, pod: str | None = None
) -> NodeMetrics:
    """`NodeMetrics` of `node` at `now`: containers without eru labels or without a measurement are left out; `pod`
    lets the eviction service use the pod's watermarks and scope its eviction budgets (docs/colocation.md)."""
    containers = []
    for container_id in sorted(known):
        managed = known[container_id].managed
        measured = usage.containers.get(container_id)
        if managed is None or measured is None:
            continue
        containers.append(
            ContainerMetrics(
                container_id=container_id,
                priority_class=managed.priority_class,
                priority=managed.priority,
                tenant=managed.tenant,
                cpu_used=round(measured.cpu_used, 6),
                memory_used=measured.memory_used,
                throttled_periods=measured.throttled_periods,
                throttled_seconds=round(measured.throttled_seconds, 6),
                cpu_request=managed.cpu_request,
                cpu_limit=managed.cpu_limit,
                memory_request=managed.memory_request,
                memory_limit=managed.memory_limit,
                workload=managed.workload,
                desired=max(0, managed.desired),
                evictions=max(0, managed.evictions),
                budget=dict(managed.budget),
            )
        )
    return NodeMetrics(
        node=node,
        time=now,
        cpu_capacity=usage.cpu_capacity,
        cpu_used=round(usage.cpu_used, 6),
        memory_used=usage.memory_used,
        memory_total=usage.memory_total,
        containers=containers,
        pod=pod,
    )
