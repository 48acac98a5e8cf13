"""A metrics sample from measured usage and what the labels say about each container (pure).

A sample lists every container of the node, every `metrics_interval` (2 s for simulated nodes), so its cost per
container is paid thousands of times a second in a process serving many simulated nodes: the fields read from labels
are parsed once per container (`Known.sample_fields`) and the agent writes the wire form directly (`sample_wire`,
equal to `eru.bus.codec.to_wire` of the validated sample) instead of building and serialising one model per
container (docs/node-agent.md "Cost per container").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eru.domain.messages import NodeMetrics
from eru_node_agent.runtime.base import NodeUsage
from eru_node_agent.state import Known


def sample_wire(
    node: str,
    now: float,
    usage: NodeUsage,
    known: Mapping[str, Known],
    *,
    pod: str | None = None,
    registered: tuple[float, int] | None = None,
) -> dict[str, Any]:
    """The `NodeMetrics` of `node` at `now` as it travels (what `eru.bus.codec.to_wire` of the model gives):
    containers without eru labels or without a measurement are left out; `pod` lets the eviction service use the
    pod's watermarks and scope its eviction budgets (docs/colocation.md); `registered` (cores, bytes) is what the node
    registered for placement, the bound of the batch capacity the eviction service publishes."""
    containers = []
    measured_of = usage.containers
    for container_id in sorted(known):
        measured = measured_of.get(container_id)
        if measured is None:
            continue
        fields = known[container_id].sample_fields
        if fields is None:
            continue
        containers.append(
            {
                "container_id": container_id,
                "cpu_used": round(measured.cpu_used, 6),
                "memory_used": measured.memory_used,
                "throttled_periods": measured.throttled_periods,
                "throttled_seconds": round(measured.throttled_seconds, 6),
                **fields,
            }
        )
    return {
        "node": node,
        "time": now,
        "cpu_capacity": usage.cpu_capacity,
        "cpu_used": round(usage.cpu_used, 6),
        "memory_used": usage.memory_used,
        "memory_total": usage.memory_total,
        "batch_cpu_allowed": None,
        "containers": containers,
        "pod": pod,
        "registered_cpu": None if registered is None else registered[0],
        "registered_memory": None if registered is None else registered[1],
    }


def build_sample(
    node: str,
    now: float,
    usage: NodeUsage,
    known: Mapping[str, Known],
    *,
    pod: str | None = None,
    registered: tuple[float, int] | None = None,
) -> NodeMetrics:
    """The same sample as a validated model."""
    return NodeMetrics.model_validate(sample_wire(node, now, usage, known, pod=pod, registered=registered))
