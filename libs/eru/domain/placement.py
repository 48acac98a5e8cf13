"""Messages between the allocator and the distributor (`eru.distributor.place`, `eru.distributor.place_batch`): how
many instances each node should get (docs/placement-modes.md, docs/pipeline.md "Performance")."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from eru.domain.resources import Frozen, Name


class PlacementSlot(Frozen):
    """One node in a placement request (docs/placement-modes.md inputs)."""

    name: Name
    capacity: int = Field(ge=0)
    count: int = Field(default=0, ge=0)
    usage: float = Field(default=0.0, ge=0)
    rate: float = Field(default=0.0, ge=0)
    labels: dict[str, str] = Field(default_factory=dict)


class PlacementColumns(Frozen):
    """The nodes of a placement request as columns, one value per node in node order (docs/planning.md "Per-batch
    cost": no object per node on either side). `names` may be left out of the asks of a `PlaceBatchRequest` that
    carries them once for all; `count` left out is 0 everywhere, `usage` and `rate` only for the modes that read
    them (`global`, `drained`, plugins)."""

    names: list[Name] | None = None
    capacity: list[Annotated[int, Field(ge=0)]]
    count: list[Annotated[int, Field(ge=0)]] | None = None
    usage: list[Annotated[float, Field(ge=0)]] | None = None
    rate: list[Annotated[float, Field(ge=0)]] | None = None


class PlaceRequest(Frozen):
    """Allocator → distributor (`eru.distributor.place`): how many instances each node should get; the nodes as
    `slots` (one object each) or as `columns` (what the allocator sends), not both."""

    mode: str = "auto"
    count: int = Field(ge=0)
    nodes_limit: int = Field(default=0, ge=0)
    options: dict[str, Any] = Field(default_factory=dict)
    slots: list[PlacementSlot] = Field(default_factory=list)
    columns: PlacementColumns | None = None


class PlaceReply(Frozen):
    """Distributor → allocator: new instances per node (only nodes that get some)."""

    placements: dict[str, int]


class PlaceBatchRequest(Frozen):
    """Allocator → distributor (`eru.distributor.place_batch`): the placement requests of one allocator batch, each
    decided on its own (docs/pipeline.md "Performance": one distributor round trip per batch, not per request)."""

    asks: list[PlaceRequest] = Field(min_length=1, max_length=1000)
    names: list[Name] | None = None
    """The node names of every ask whose `columns` leave `names` out (a batch's asks see the same nodes)."""


class PlaceOutcome(Frozen):
    """One ask's answer: `placements` (only nodes that get instances), or `error` (`code`, `message`, `details`)."""

    placements: dict[str, int] | None = None
    error: dict[str, Any] | None = None


class PlaceBatchReply(Frozen):
    """Distributor → allocator: one outcome per ask, in the order of the asks."""

    results: list[PlaceOutcome]
