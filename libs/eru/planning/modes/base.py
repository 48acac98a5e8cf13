"""The placement-mode seam: every mode is a pure function from node slots to per-node instance counts.

A mode never sees resources, only what docs/placement-modes.md gives it per node: how many more instances fit
(`capacity`), how many of this workload are already there (`count`), the used fraction of the node's primary resource
(`usage`) and the fraction one more instance adds (`rate`). Slots come in input order (the services sort nodes by name),
and every tie is broken by that order, so a placement is deterministic and replayable.

New modes (for example `score`) register themselves with `register_mode` and need no change elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from eru.bounded import clip
from eru.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class NodeSlot:
    """One node as a placement mode sees it."""

    name: str
    capacity: int
    count: int = 0
    usage: float = 0.0
    rate: float = 0.0
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    """What to place: `count` new instances (for `each` and `fill`, the per-node target), `nodes_limit` as in
    docs/placement-modes.md, and mode-specific `options` (for example scorer weights for `score`)."""

    count: int
    nodes_limit: int = 0
    options: Mapping[str, Any] = field(default_factory=dict)


class PlacementMode(Protocol):
    """A placement mode: slots in input order → {node name: new instances}; only nodes that get some are listed.

    Raises `PlanningFailure` (with the numbers) when the request cannot be placed, `InvalidInput` when it is malformed.
    """

    def __call__(self, slots: Sequence[NodeSlot], request: PlacementRequest) -> dict[str, int]: ...


_MODES: dict[str, PlacementMode] = {}


def register_mode(name: str) -> Callable[[PlacementMode], PlacementMode]:
    """Decorator: make a mode available under `name`."""

    def decorate(mode: PlacementMode) -> PlacementMode:
        _MODES[name] = mode
        return mode

    return decorate


def get_mode(name: str) -> PlacementMode:
    """The mode registered under `name`; an unknown name is an `InvalidInput` on field `mode`."""
    mode = _MODES.get(name)
    if mode is None:
        raise InvalidInput("mode", f"unknown placement mode {clip(name)!r} (known: {', '.join(sorted(_MODES))})")
    return mode


def mode_names() -> list[str]:
    """Names of every registered mode, sorted."""
    return sorted(_MODES)


def place(mode: str, slots: Sequence[NodeSlot], request: PlacementRequest) -> dict[str, int]:
    """Run the named mode: the one entry point the allocator, the distributor, `eru plan` and the simulator call."""
    if request.count < 0:
        raise InvalidInput("count", f"must be ≥ 0, got {request.count}")
    if request.nodes_limit < 0:
        raise InvalidInput("nodes_limit", f"must be ≥ 0, got {request.nodes_limit}")
    return get_mode(mode)(slots, request)
