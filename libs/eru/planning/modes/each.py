"""`each`: `count` new instances on every qualifying node, that is every node with capacity ≥ count
(docs/placement-modes.md).

`nodes_limit` 0 takes every qualifying node (none qualifying is a failure); L > 0 takes exactly L nodes, those with the
most capacity (ties by input order), and fails when fewer than L qualify.
"""

from __future__ import annotations

import numpy as np

from eru.errors import PlanningFailure
from eru.planning.modes.arrays import SlotArrays, check_request, register_array_mode
from eru.planning.modes.base import PlacementRequest


@register_array_mode("each")
def each(nodes: SlotArrays, request: PlacementRequest) -> dict[str, int]:
    """`request.count` instances on each qualifying node (all of them, or the `nodes_limit` roomiest)."""
    check_request(request)
    per_node = request.count
    if per_node == 0:
        nodes.check_unique_names()
        return {}
    capacity = nodes.capacity
    qualifying = capacity >= per_node
    qualifying_total = int(np.count_nonzero(qualifying))
    nodes_needed = request.nodes_limit or 1
    if qualifying_total < nodes_needed:
        raise _not_enough_nodes(nodes, request, qualifying_total, nodes_needed)
    if qualifying_total == nodes.size and request.nodes_limit in (0, nodes.size):
        return nodes.uniform_placement(None, per_node)
    if request.nodes_limit == 0 or qualifying_total == request.nodes_limit:
        chosen = np.flatnonzero(qualifying)
    else:
        chosen = np.sort(np.argsort(-capacity, kind="stable")[: request.nodes_limit])
    return nodes.uniform_placement(chosen, per_node)


def _not_enough_nodes(
    nodes: SlotArrays, request: PlacementRequest, qualifying_total: int, nodes_needed: int
) -> PlanningFailure:
    nodes.check_unique_names()
    short = {
        name: {"capacity": capacity, "needed": request.count}
        for name, capacity in zip(nodes.names, nodes.capacity.tolist(), strict=True)
        if capacity < request.count
    }
    wanted = f"exactly {nodes_needed}" if request.nodes_limit else "at least one"
    return PlanningFailure(
        f"each: {request.count} instances per node need {wanted} node(s) with capacity ≥ {request.count}, "
        f"but {qualifying_total} of {nodes.size} nodes have it",
        code="not_enough_nodes",
        mode="each",
        need=request.count * nodes_needed,
        need_per_node=request.count,
        nodes_needed=nodes_needed,
        nodes_qualifying=qualifying_total,
        available=int(nodes.capacity.sum()),
        nodes_limit=request.nodes_limit,
        per_node=short,
    )
