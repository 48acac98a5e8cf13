"""`score`: Kubernetes-style placement (docs/placement-modes.md): filter the nodes with room, score each with the
weighted plugins, place one instance on the best node, repeat.

Room is the node's capacity (with `nodes_limit` > 0, at most that many old + new instances, as in `auto`). The
total score of a node is Σ weight · plugin score (each plugin on 0..100); the highest wins, ties go to input order.
After each placement the chosen node's requested resources and QoS counts grow by one instance, so the next choice
sees it. The plugins and their inputs come from `request.options` (see `eru.planning.scorers.options`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from eru.planning.modes.arrays import SlotArrays, check_request, insufficient_room, per_node_room, register_array_mode
from eru.planning.modes.base import PlacementRequest
from eru.planning.scorers.base import FloatArray, IntArray, Scorer, ScoreState
from eru.planning.scorers.options import build_state, parse_scorers


def place_scored(state: ScoreState, room: IntArray, count: int, scorers: Sequence[tuple[Scorer, float]]) -> IntArray:
    """New instances per node: `count` placed one at a time on the best-scoring node with room (updates `state`).

    The caller has checked that Σ room ≥ count.
    """
    placed = np.zeros(room.shape[0], dtype=np.int64)
    left = room.astype(np.int64).copy()
    for _ in range(count):
        open_nodes = left > 0
        total: FloatArray = np.zeros(room.shape[0], dtype=np.float64)
        for scorer, weight in scorers:
            total += weight * scorer(state)
        total[~open_nodes] = -np.inf
        best = int(np.argmax(total))
        placed[best] += 1
        left[best] -= 1
        state.place(best)
    return placed


@register_array_mode("score")
def score(nodes: SlotArrays, request: PlacementRequest) -> dict[str, int]:
    """`request.count` instances, each on the node with the highest weighted plugin score (ties: input order)."""
    check_request(request)
    scorers = parse_scorers(request.options)
    state = build_state(nodes.names, lambda: nodes.usage, lambda: nodes.rate, request.options)
    if request.count == 0:
        nodes.check_unique_names()
        return {}
    room = per_node_room(nodes, request.nodes_limit)
    if int(room.sum()) < request.count:
        raise insufficient_room("score", nodes, room, request)
    placed = place_scored(state, room, request.count, [(scorer, weight) for _, scorer, weight in scorers])
    return nodes.placement(placed)
