"""`fill`: top every node up to `count` instances of the workload, all or nothing (docs/placement-modes.md).

Nodes already at or above `count` are left alone. If a node that needs instances cannot reach `count` the whole fill
fails (`fill_unreachable`); if no node needs any the outcome is `already_filled`. `nodes_limit` L > 0 considers only the
first L nodes that can reach `count`, ordered by most existing instances, then most capacity, then input order (nodes
already at `count` use up the limit too); fewer than L such nodes is `not_enough_nodes`.
"""

from __future__ import annotations

import numpy as np

from eru.errors import PlanningFailure
from eru.planning.modes.arrays import IntArray, SlotArrays, check_request, register_array_mode
from eru.planning.modes.base import PlacementRequest


@register_array_mode("fill")
def fill(nodes: SlotArrays, request: PlacementRequest) -> dict[str, int]:
    """New instances per node so that every considered node holds `request.count` of them."""
    check_request(request)
    target = request.count
    capacity = nodes.capacity
    needed = np.maximum(target - nodes.count, 0)
    if request.nodes_limit == 0:
        short = np.flatnonzero(capacity < needed)
        if short.size:
            raise _unreachable(nodes, request, needed, short)
        considered = needed
    else:
        reachable = np.flatnonzero(capacity >= needed)
        if reachable.size < request.nodes_limit:
            raise _not_enough_nodes(nodes, request, needed, int(reachable.size))
        order = np.lexsort((reachable, -capacity[reachable], -nodes.count[reachable]))
        chosen = reachable[order[: request.nodes_limit]]
        considered = np.zeros_like(needed)
        considered[chosen] = needed[chosen]
    if not considered.any():
        nodes.check_unique_names()
        raise PlanningFailure(
            f"fill: every considered node already holds {target} or more instances",
            code="already_filled",
            mode="fill",
            need=0,
            target=target,
            nodes_limit=request.nodes_limit,
        )
    return nodes.placement(considered)


def _unreachable(nodes: SlotArrays, request: PlacementRequest, needed: IntArray, short: IntArray) -> PlanningFailure:
    nodes.check_unique_names()
    names = nodes.names
    per_node = {
        names[i]: {"capacity": capacity, "existing": existing, "needed": need}
        for i, capacity, existing, need in zip(
            short.tolist(),
            nodes.capacity[short].tolist(),
            nodes.count[short].tolist(),
            needed[short].tolist(),
            strict=True,
        )
    }
    listed = ", ".join(
        f"{name} needs {row['needed']} with capacity {row['capacity']}" for name, row in per_node.items()
    )
    return PlanningFailure(
        f"fill: to reach {request.count} instances per node, {len(per_node)} node(s) need more than their capacity "
        f"({listed})",
        code="fill_unreachable",
        mode="fill",
        target=request.count,
        need=int(needed.sum()),
        available=int(np.minimum(needed, nodes.capacity).sum()),
        per_node=per_node,
    )


def _not_enough_nodes(
    nodes: SlotArrays, request: PlacementRequest, needed: IntArray, reachable_total: int
) -> PlanningFailure:
    nodes.check_unique_names()
    short = np.flatnonzero(nodes.capacity < needed)
    per_node = {
        nodes.names[i]: {"capacity": capacity, "needed": need}
        for i, capacity, need in zip(
            short.tolist(), nodes.capacity[short].tolist(), needed[short].tolist(), strict=True
        )
    }
    return PlanningFailure(
        f"fill: nodes_limit {request.nodes_limit} needs that many nodes able to reach {request.count} instances, "
        f"but {reachable_total} of {nodes.size} can",
        code="not_enough_nodes",
        mode="fill",
        target=request.count,
        nodes_needed=request.nodes_limit,
        nodes_qualifying=reachable_total,
        nodes_limit=request.nodes_limit,
        per_node=per_node,
    )
