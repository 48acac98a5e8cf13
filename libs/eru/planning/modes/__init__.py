"""Placement modes (docs/placement-modes.md): `place(mode, slots, request)` → {node: new instances}.

Importing this package registers every mode module found in it (`auto`, `each`, `fill`, `global`, `drained`, and any
module added later such as `score`): a new mode is a new file that registers itself, with no edit here.
"""

from __future__ import annotations

import importlib
import pkgutil

from eru.planning.modes.arrays import SlotArrays, place_arrays, register_array_mode
from eru.planning.modes.base import (
    NodeSlot,
    PlacementMode,
    PlacementRequest,
    get_mode,
    mode_names,
    place,
    register_mode,
)

_NOT_MODES = {"arrays", "base"}

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in _NOT_MODES:
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "NodeSlot",
    "PlacementMode",
    "PlacementRequest",
    "SlotArrays",
    "get_mode",
    "mode_names",
    "place",
    "place_arrays",
    "register_array_mode",
    "register_mode",
]
