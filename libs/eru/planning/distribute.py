"""The distributor's decision (docs/placement-modes.md), pure: placement requests in their wire form → per-node new
instances, one request at a time (`eru.distributor.place`) or a batch of them (`eru.distributor.place_batch`).

The allocator runs `place_slots` itself to predict each request of a batch (it needs request n's placements to
stage request n + 1) and commits only what the distributor answers for the whole batch (docs/pipeline.md,
"Performance"): both sides go through this one module, so they agree unless the two services run different code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from eru.domain.messages import PlaceBatchReply, PlaceBatchRequest, PlaceOutcome, PlaceReply, PlaceRequest
from eru.errors import EruError, InvalidInput
from eru.planning.modes import NodeSlot, PlacementRequest, place


def place_slots(
    mode: str, slots: Sequence[NodeSlot], count: int, nodes_limit: int, options: Mapping[str, Any]
) -> dict[str, int]:
    """The placement mode over `slots`: new instances per node, only nodes that get some. Raises the mode's
    `PlanningFailure` (with its numbers) or `InvalidInput`."""
    placements = place(mode, list(slots), PlacementRequest(count=count, nodes_limit=nodes_limit, options=options))
    return {name: n for name, n in placements.items() if n > 0}


def node_slots(request: PlaceRequest, field: str = "slots") -> list[NodeSlot]:
    """The request's slots as the modes see them, in the order given; a node named twice is `InvalidInput`."""
    seen: set[str] = set()
    slots: list[NodeSlot] = []
    for index, slot in enumerate(request.slots):
        if slot.name in seen:
            raise InvalidInput(f"{field}[{index}].name", f"node {slot.name!r} appears more than once")
        seen.add(slot.name)
        slots.append(NodeSlot(slot.name, slot.capacity, slot.count, slot.usage, slot.rate, dict(slot.labels)))
    return slots


def decide(request: PlaceRequest) -> PlaceReply:
    """The placement for one request: per-node new instances, only nodes that get some."""
    placements = place_slots(request.mode, node_slots(request), request.count, request.nodes_limit, request.options)
    return PlaceReply(placements=placements)


def decide_many(batch: PlaceBatchRequest) -> PlaceBatchReply:
    """Every ask of a batch decided on its own, in order: an ask that is invalid or cannot be placed gets its error
    (field names prefixed with `asks[i].`) and the others their placements."""
    results: list[PlaceOutcome] = []
    for index, ask in enumerate(batch.asks):
        try:
            slots = node_slots(ask, f"asks[{index}].slots")
            placements = place_slots(ask.mode, slots, ask.count, ask.nodes_limit, ask.options)
        except EruError as error:
            results.append(PlaceOutcome(error=error_dict(error)))
            continue
        results.append(PlaceOutcome(placements=placements))
    return PlaceBatchReply(results=results)


def error_dict(error: EruError) -> dict[str, Any]:
    """An error as one outcome of a batch (the shape of an error reply: `code`, `message`, `details`)."""
    return {"code": error.code, "message": error.message, "details": dict(error.details)}
