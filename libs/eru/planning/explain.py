"""Why a node's capacity is what it is: the numbers behind a planning failure (docs/placement-modes.md: "not enough
resource" alone is the complaint Eru's users filed)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from eru.errors import PlanningFailure
from eru.planning.batch import batch_bounds
from eru.planning.capacity import NodeAnalysis, analyse
from eru.planning.request import NormalizedRequest, PlanningConfig
from eru.planning.resources import NodeResources, free_cpu, free_memory

MAX_EXPLAINED_NODES = 100


def explain_node(
    node: NodeResources, request: NormalizedRequest, config: PlanningConfig, capacity: int
) -> dict[str, Any]:
    """The resource numbers of one node for `request`, and which one limits its capacity (for a batch request also
    the node's batch allowance: `batch_cpu` / `batch_memory` limit it when their bound is the capacity)."""
    entry = _resource_entry(node, replace(request, batch=False), config, capacity)
    if request.batch:
        cpu_bound, memory_bound = batch_bounds(node, request)
        base = config.share_base
        entry["batch_allowance"] = {
            "cpu": None if node.batch_cpu is None else node.batch_cpu / base,
            "memory": node.batch_memory,
            "cpu_bound": cpu_bound,
            "memory_bound": memory_bound,
        }
        ordinary = analyse(node, replace(request, batch=False), config).capacity
        entry["ordinary_capacity"] = ordinary
        for name, bound in (("batch_cpu", cpu_bound), ("batch_memory", memory_bound)):
            if bound is not None and bound == capacity < ordinary:
                entry["limited_by"] = name
                break
    return entry


def _resource_entry(
    node: NodeResources, request: NormalizedRequest, config: PlanningConfig, capacity: int
) -> dict[str, Any]:
    base = config.share_base
    memory = free_memory(node)
    memory_bound = memory // request.memory_request if request.memory_request else None
    entry: dict[str, Any] = {"capacity": capacity, "free_memory": memory, "memory_bound": memory_bound}
    if not request.cpu_bind:
        cores = len(node.cpu_map)
        entry.update(cores=cores, cores_needed=request.cpu_request / base)
        entry["limited_by"] = "cores" if cores * base < request.cpu_request else "memory"
        return entry
    cpu_bound = analyse(node, replace(request, memory_request=0), config).capacity
    entry.update(free_cpu=sum(free_cpu(node).values()) / base, cpu_bound=cpu_bound)
    entry["limited_by"] = "memory" if memory_bound is not None and memory_bound < cpu_bound else "cpu"
    return entry


def explain_failure(
    failure: PlanningFailure,
    nodes: Sequence[NodeResources],
    analyses: Sequence[NodeAnalysis],
    request: NormalizedRequest,
    config: PlanningConfig,
) -> PlanningFailure:
    """`failure` with, per node (the lowest capacities first, at most MAX_EXPLAINED_NODES), the resource numbers and
    the limiting resource, and a count of nodes per limiting resource in the message."""
    order = sorted(range(len(nodes)), key=lambda index: analyses[index].capacity)
    resources = {}
    limited: dict[str, int] = {}
    for index in order[:MAX_EXPLAINED_NODES]:
        entry = explain_node(nodes[index], request, config, analyses[index].capacity)
        resources[nodes[index].name] = entry
        limited[entry["limited_by"]] = limited.get(entry["limited_by"], 0) + 1
    summary = ", ".join(f"{resource} on {count} node{'s' if count != 1 else ''}" for resource, count in limited.items())
    message = f"{failure.message}; capacity limited by {summary}" if summary else failure.message
    explained = PlanningFailure(message, code=failure.code, **failure.details)
    explained.details["resources"] = resources
    explained.details["limited_by"] = limited
    return explained
