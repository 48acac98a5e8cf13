"""`score` options from the planning core's node snapshots: what the allocator (or `plan_deploy`'s caller) passes
as `options` when it deploys with mode `score`.

Resources scored: "cpu" in pieces and "memory" in bytes. A node's allocatable CPU is the sum of its `cpu_map`, its
requested CPU the pieces reserved on its cores (CPU-prime allocations); memory-prime CPU is enforced by CFS quota and
not reserved (docs/planning.md), so a memory-prime instance adds no CPU here. Memory: node memory, used memory, the
instance's memory request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from eru.planning.request import NormalizedRequest
from eru.planning.resources import NodeResources
from eru.planning.scorers.options import NodeLoad, merge_weights, score_options
from eru.planning.scorers.qos import qos_class


def resource_score_options(
    nodes: Sequence[NodeResources],
    request: NormalizedRequest,
    *,
    scorers: Mapping[str, float] | None = None,
    qos_class: str | None = None,
    qos: Mapping[str, Mapping[str, int]] | None = None,
    resource_weights: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """Options for `plan_deploy(..., mode="score", options=...)`; `qos` gives per node {class: instances}."""
    qos = qos or {}
    loads = {
        node.name: NodeLoad(
            allocatable={"cpu": sum(node.cpu_map.values()), "memory": node.memory},
            requested={"cpu": sum(node.used_cpu_map.values()), "memory": node.used_memory},
            qos=qos.get(node.name, {}),
        )
        for node in nodes
    }
    return score_options(
        request={"cpu": request.cpu_request if request.cpu_bind else 0, "memory": request.memory_request},
        nodes=loads,
        scorers=scorers,
        qos_class=qos_class,
        resource_weights=resource_weights,
    )


def deploy_score_options(
    nodes: Sequence[NodeResources],
    request: NormalizedRequest,
    options: Mapping[str, Any] | None = None,
    *,
    pod_weights: Mapping[str, float] | None = None,
    qos: Mapping[str, Mapping[str, int]] | None = None,
) -> dict[str, Any]:
    """The options a deploy with mode `score` sends to the distributor: the request's own `options` completed with
    the nodes' resources (unless it gives `request`/`nodes` itself), the plugin weights (`merge_weights(pod policy,
    request)`) and the instance's QoS class (from its requests and limits unless given)."""
    given = dict(options or {})
    weights = merge_weights(pod_weights, given.get("scorers"))
    if "request" in given or "nodes" in given:
        return {**given, "scorers": weights}
    cls = given.get("qos_class") or qos_class(
        request.cpu_request, request.cpu_limit, request.memory_request, request.memory_limit
    )
    built = resource_score_options(
        nodes, request, scorers=weights, qos_class=str(cls), qos=qos, resource_weights=given.get("resource_weights")
    )
    return built
