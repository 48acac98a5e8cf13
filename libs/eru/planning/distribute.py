"""The distributor's decision (docs/placement-modes.md), pure: placement requests in their wire form → per-node new
instances, one request at a time (`eru.distributor.place`) or a batch of them (`eru.distributor.place_batch`).

The allocator runs `place_slots` itself to predict each request of a batch (it needs request n's placements to
stage request n + 1) and commits only what the distributor answers for the whole batch (docs/pipeline.md,
"Performance"): both sides go through this one module, so they agree unless the two services run different code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eru.domain.messages import PlaceBatchReply, PlaceBatchRequest, PlaceOutcome, PlaceReply, PlaceRequest
from eru.errors import EruError, InvalidInput
from eru.planning.modes import NodeSlot, PlacementRequest, place, place_arrays


@dataclass(frozen=True, slots=True)
class SlotColumns:
    """The placement input as columns, one value per node in node order: what `Staged.columns` gives, what the
    allocator predicts with and sends (docs/planning.md "Per-batch cost"). `count` None is 0 everywhere; `usage` and
    `rate` None for the modes that never read them (as `place_locally` passes them)."""

    names: Sequence[str]
    capacity: Sequence[int]
    count: Sequence[int] | None = None
    usage: Sequence[float] | None = None
    rate: Sequence[float] | None = None

    @classmethod
    def from_slots(cls, slots: Sequence[NodeSlot]) -> SlotColumns:
        """The columns of `slots` (their labels are not sent: no built-in mode reads them)."""
        return cls(
            [slot.name for slot in slots],
            [slot.capacity for slot in slots],
            [slot.count for slot in slots],
            [slot.usage for slot in slots],
            [slot.rate for slot in slots],
        )

    def __len__(self) -> int:
        return len(self.names)

    def wire(self, *, names: bool = True) -> dict[str, Any]:
        """The `PlacementColumns` wire form (`names=False`: left out, a batch carries them once)."""
        body: dict[str, Any] = {"capacity": list(self.capacity)}
        if names:
            body["names"] = list(self.names)
        for key, column in (("count", self.count), ("usage", self.usage), ("rate", self.rate)):
            if column is not None:
                body[key] = list(column)
        return body


def place_columns(
    mode: str, columns: SlotColumns, count: int, nodes_limit: int, options: Mapping[str, Any]
) -> dict[str, int]:
    """The placement mode over `columns` (`place_arrays`, the function `place_locally` runs): new instances per
    node, only nodes that get some. Raises the mode's `PlanningFailure` or `InvalidInput`."""
    existing = columns.count if columns.count is not None else [0] * len(columns.names)
    request = PlacementRequest(count=count, nodes_limit=nodes_limit, options=options)
    placements = place_arrays(mode, columns.names, columns.capacity, existing, columns.usage, columns.rate, request)
    return {name: n for name, n in placements.items() if n > 0}


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


def request_columns(
    request: PlaceRequest, names: Sequence[str] | None = None, field: str = "", *, names_unique: bool = False
) -> SlotColumns | None:
    """The request's `columns` checked (`names`: the batch's, for columns that leave them out; `names_unique`: the
    caller found them unique), or None when it sends `slots`. `InvalidInput` naming the field: both forms given, no
    names, a column of another length, a node named twice."""
    given = request.columns
    if given is None:
        return None
    where = f"{field}columns"
    if request.slots:
        raise InvalidInput(f"{field}slots", "give the nodes as slots or as columns, not both")
    node_names = given.names if given.names is not None else names
    if node_names is None:
        raise InvalidInput(f"{where}.names", "required (the batch carries no names)")
    size = len(node_names)
    for key in ("capacity", "count", "usage", "rate"):
        column = getattr(given, key)
        if column is not None and len(column) != size:
            raise InvalidInput(f"{where}.{key}", f"has {len(column)} values for {size} nodes")
    if not (names_unique and given.names is None) and len(set(node_names)) != size:
        seen: set[str] = set()
        for index, name in enumerate(node_names):
            if name in seen:
                raise InvalidInput(f"{where}.names[{index}]", f"node {name!r} appears more than once")
            seen.add(name)
    return SlotColumns(node_names, given.capacity, given.count, given.usage, given.rate)


def _placed(
    request: PlaceRequest, names: Sequence[str] | None, field: str, *, names_unique: bool = False
) -> dict[str, int]:
    """The placement of one request, whichever form its nodes came in."""
    columns = request_columns(request, names, field, names_unique=names_unique)
    if columns is not None:
        return place_columns(request.mode, columns, request.count, request.nodes_limit, request.options)
    slots = node_slots(request, f"{field}slots")
    return place_slots(request.mode, slots, request.count, request.nodes_limit, request.options)


def decide(request: PlaceRequest) -> PlaceReply:
    """The placement for one request: per-node new instances, only nodes that get some."""
    return PlaceReply(placements=_placed(request, None, ""))


def decide_many(batch: PlaceBatchRequest) -> PlaceBatchReply:
    """Every ask of a batch decided on its own, in order: an ask that is invalid or cannot be placed gets its error
    (field names prefixed with `asks[i].`) and the others their placements."""
    results: list[PlaceOutcome] = []
    # the batch's names checked once for every ask that uses them, and one tuple for all (the modes' name checks
    # are made once per tuple, eru.planning.modes.arrays), not once per ask (docs/planning.md "Per-batch cost")
    names = None if batch.names is None else tuple(batch.names)
    unique = names is not None and len(set(names)) == len(names)
    for index, ask in enumerate(batch.asks):
        try:
            placements = _placed(ask, names, f"asks[{index}].", names_unique=unique)
        except EruError as error:
            results.append(PlaceOutcome(error=error_dict(error)))
            continue
        results.append(PlaceOutcome(placements=placements))
    return PlaceBatchReply(results=results)


def error_dict(error: EruError) -> dict[str, Any]:
    """An error as one outcome of a batch (the shape of an error reply: `code`, `message`, `details`)."""
    return {"code": error.code, "message": error.message, "details": dict(error.details)}
