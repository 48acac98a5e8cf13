"""`drained`: bin packing — the nodes with the least capacity first, each taken to its capacity before the next
(docs/placement-modes.md). Order: capacity ascending, then usage descending, then input order. `nodes_limit` > 0 caps
old + new instances per node, as in `auto` (a decision of this implementation, recorded in docs/placement-modes.md), and
the order then uses that reduced room.
"""

from __future__ import annotations

import numpy as np

from eru.planning.modes.arrays import (
    SlotArrays,
    check_request,
    insufficient_room,
    per_node_room,
    register_array_mode,
)
from eru.planning.modes.base import PlacementRequest


@register_array_mode("drained")
def drained(nodes: SlotArrays, request: PlacementRequest) -> dict[str, int]:
    """Pack `request.count` instances onto the fullest nodes: each node to its capacity, smallest capacity first."""
    check_request(request)
    need = request.count
    if need == 0:
        nodes.check_unique_names()
        return {}
    room = per_node_room(nodes, request.nodes_limit)
    if int(room.sum()) < need:
        raise insufficient_room("drained", nodes, room, request)
    # Nodes whose room is below the room at which the cut falls are filled whatever their usage; those above it get
    # nothing. Only the nodes with exactly that room need the usage order, so only they are sorted.
    open_room = np.sort(room[room > 0])
    cut_room = int(open_room[np.searchsorted(np.cumsum(open_room), need)])
    below_cut = room < cut_room
    added = np.where(below_cut, room, 0)
    left = need - int(added.sum())
    at_cut = np.flatnonzero(room == cut_room)
    at_cut = at_cut[np.argsort(-nodes.usage[at_cut], kind="stable")]
    whole, part = divmod(left, cut_room)
    added[at_cut[:whole]] = cut_room
    if part:
        added[at_cut[whole]] = part
    return nodes.placement(added)
