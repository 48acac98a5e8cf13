"""Column form of the placement input, and the array fast path.

The built-in modes work on columns (numpy arrays) rather than on one `NodeSlot` at a time: a mode registered with
`register_array_mode` is callable both ways — through `place(mode, slots, request)` (the slots are converted, and the
conversion is part of every figure in `bench/bench_placement.py`) and through `place_arrays(...)`, for callers that
already hold columns. Modes registered only with `base.register_mode` (for example `score`) still work through
`place_arrays`: the columns are turned back into slots for them.

Validation lives here too, so that every mode rejects the same malformed input the same way: a node's fields are named
`nodes[i].<field>` (the path in an `eru plan` problem), with the node's name in the details.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from itertools import compress
from typing import Any

import numpy as np
import numpy.typing as npt

from eru.errors import InvalidInput, PlanningFailure
from eru.planning.modes.base import NodeSlot, PlacementRequest, get_mode, register_mode

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

MAX_INSTANCES = 10**15
"""Largest capacity, count, request count or nodes_limit accepted: keeps every sum exact in int64 and every
instance index exact in float64."""
MAX_FRACTION = 1e6
"""Largest usage or rate accepted (they are fractions of a node's primary resource; oversold nodes exceed 1)."""


_INT_FIELDS = ("capacity", "count")
_FRACTION_FIELDS = ("usage", "rate")
Column = Sequence[Any] | npt.ArrayLike


_SLOT_FIELD: dict[str, Callable[[Sequence[NodeSlot]], list[Any]]] = {
    # One comprehension per field: several times quicker than getattr with a field name.
    "capacity": lambda slots: [slot.capacity for slot in slots],
    "count": lambda slots: [slot.count for slot in slots],
    "usage": lambda slots: [slot.usage for slot in slots],
    "rate": lambda slots: [slot.rate for slot in slots],
}


class SlotArrays:
    """The placement input as read-only numpy columns, in input order.

    Names are validated at once; each other column is converted and validated the first time a mode reads it, so a
    mode pays only for what it uses (`each` never converts usage, rate or count). The object is immutable to its
    users: the columns are read-only arrays, computed once.
    """

    __slots__ = ("_columns", "_given", "_names_unique", "_slots", "names")

    def __init__(
        self,
        names: tuple[str, ...],
        *,
        slots: Sequence[NodeSlot] = (),
        given: Mapping[str, Column | None] | None = None,
    ) -> None:
        if names is not _CHECKED[0]:
            _check_name_types(names)
        self.names = names
        self._slots = slots
        self._given = given
        self._columns: dict[str, np.ndarray[Any, Any]] = {}
        self._names_unique = False

    @classmethod
    def from_slots(cls, slots: Sequence[NodeSlot]) -> SlotArrays:
        """Columns over `slots` (validated as they are read)."""
        return cls(tuple([slot.name for slot in slots]), slots=slots)

    @classmethod
    def from_columns(
        cls,
        names: Sequence[str],
        capacity: Column,
        count: Column | None,
        usage: Column | None = None,
        rate: Column | None = None,
    ) -> SlotArrays:
        """Columns given by the caller (lists or arrays, one value per name); `usage`/`rate` may be absent when the
        mode does not read them."""
        return cls(tuple(names), given={"capacity": capacity, "count": count, "usage": usage, "rate": rate})

    @property
    def size(self) -> int:
        """Number of nodes."""
        return len(self.names)

    @property
    def capacity(self) -> IntArray:
        """How many more instances each node can take."""
        return self._column("capacity")

    @property
    def count(self) -> IntArray:
        """Instances of the workload already on each node."""
        return self._column("count")

    @property
    def usage(self) -> FloatArray:
        """Used fraction of each node's primary resource."""
        return self._column("usage")

    @property
    def rate(self) -> FloatArray:
        """Fraction of each node's primary resource one more instance uses."""
        return self._column("rate")

    def validate_all(self) -> None:
        """Validate every column now, including those the mode would not read (for callers that want strictness)."""
        self.check_unique_names()
        for field in ("capacity", "count", "usage", "rate"):
            if self._given is None or self._given[field] is not None:
                self._column(field)

    def check_unique_names(self) -> None:
        """`InvalidInput` on the first repeated name. Every answer and every failure goes through this check, but
        `placement` makes it for free when every node is in the answer (the answer's dict then counts the names)."""
        if not self._names_unique:
            if self.names is not _CHECKED[0]:
                _check_unique(self.names)
                _CHECKED[0] = self.names  # well-formed (checked on construction) and unique
            self._names_unique = True

    def placement(self, added: IntArray) -> dict[str, int]:
        """{name: n} for the nodes that get instances (`added` per node), in input order, with plain Python ints."""
        counts: list[int] = added.tolist()
        if np.count_nonzero(added) == len(counts):
            result = dict(zip(self.names, counts, strict=True))
            if len(result) != len(counts):
                self.check_unique_names()
            return result
        self.check_unique_names()
        return dict(zip(compress(self.names, counts), filter(None, counts), strict=True))

    def uniform_placement(self, chosen: IntArray | None, per_node: int) -> dict[str, int]:
        """`per_node` instances on each chosen node (None: every node), in input order."""
        if chosen is None:
            result = dict.fromkeys(self.names, per_node)
            if len(result) != len(self.names):
                self.check_unique_names()
            return result
        self.check_unique_names()
        names = self.names
        return dict.fromkeys([names[i] for i in chosen.tolist()], per_node)

    def _column(self, field: str) -> np.ndarray[Any, Any]:
        column = self._columns.get(field)
        if column is None:
            given = None if self._given is None else self._given[field]
            if self._given is not None and given is None:
                raise InvalidInput(field, "this placement mode needs every node's " + field)
            values: Column = _SLOT_FIELD[field](self._slots) if given is None else given
            if field in _INT_FIELDS:
                column = _int_column(values, field, self.names)
            else:
                column = _fraction_column(values, field, self.names)
            self._columns[field] = column
        return column


_CHECKED: list[tuple[str, ...] | None] = [None]
"""The last names found well-formed and unique, held (so no other tuple takes its id): the same tuple object given
again — the node names of every request of a batch, patched by the analysis cache (docs/planning.md "Per-batch
cost") — is not checked again. A tuple of strings cannot change, so the checks would find what they found."""


def _check_unique(names: tuple[str, ...]) -> None:
    if len(set(names)) != len(names):
        seen: set[str] = set()
        for index, name in enumerate(names):
            if name in seen:
                raise InvalidInput(f"nodes[{index}].name", f"duplicate node name {name!r}", node=name)
            seen.add(name)


def _check_name_types(names: tuple[str, ...]) -> None:
    try:
        "".join(names)  # the quickest way to be sure every name is a str
        well_formed = all(names)
    except TypeError:
        well_formed = False
    if not well_formed:
        index = next(i for i, name in enumerate(names) if not isinstance(name, str) or not name)
        raise InvalidInput(f"nodes[{index}].name", f"must be a non-empty string, got {names[index]!r}")


def _convert(values: Column, dtype: type[np.generic], numbers: tuple[type, ...]) -> np.ndarray[Any, Any] | None:
    """`values` as a new 1-d array of `dtype`, or None when some value is not one of `numbers` (or does not fit).

    Lists (what `from_slots` builds) take a quick path: Python's `sum` fails or turns non-integral on a stray string,
    float or None, and then `np.fromiter` converts without numpy's type inference. Ranges are checked by the caller.
    """
    if isinstance(values, list | tuple):
        try:
            total = sum(values)
        except TypeError:
            return None
        if not isinstance(total, numbers):
            return None
        try:
            return np.fromiter(values, dtype, len(values))
        except (OverflowError, ValueError, TypeError):
            return None
    try:
        column = np.asarray(values)
    except (ValueError, TypeError):
        return None
    kinds = "iub" if dtype is np.int64 else "iuf"
    if column.dtype.kind not in kinds:
        return None
    return column.astype(dtype)  # a copy: the caller's array stays theirs


def _check_length(values: Column, field: str, names: tuple[str, ...]) -> None:
    length = len(values) if isinstance(values, list | tuple) else np.shape(values)
    if length != len(names) and length != (len(names),):
        raise InvalidInput(field, f"must hold one value per node ({len(names)}), got {length}")


def _given_values(values: Column) -> list[Any]:
    """The values as the caller gave them, for naming the first bad one."""
    if isinstance(values, list | tuple):
        return list(values)
    converted = np.asarray(values, dtype=object).ravel().tolist()
    return list(converted)


def _int_column(values: Column, field: str, names: tuple[str, ...]) -> IntArray:
    _check_length(values, field, names)
    column = _convert(values, np.int64, (int, np.integer))
    if column is None or (column.size and (column.min() < 0 or column.max() > MAX_INSTANCES)):
        for index, value in enumerate(_given_values(values)):
            if not isinstance(value, int | np.integer):
                reason = f"must be an integer, got {value!r}"
            elif not 0 <= value <= MAX_INSTANCES:
                reason = f"must be between 0 and {MAX_INSTANCES}, got {value}"
            else:
                continue
            raise InvalidInput(f"nodes[{index}].{field}", reason, node=names[index])
        raise InvalidInput(field, f"must hold integers between 0 and {MAX_INSTANCES}")
    column.flags.writeable = False
    return column


def _is_fraction(value: Any) -> bool:
    return bool(
        not isinstance(value, bool)
        and isinstance(value, int | float | np.integer | np.floating)
        and math.isfinite(value)
        and 0 <= value <= MAX_FRACTION
    )


def _fraction_column(values: Column, field: str, names: tuple[str, ...]) -> FloatArray:
    _check_length(values, field, names)
    column = _convert(values, np.float64, (int, float, np.integer, np.floating))
    # NaN fails both comparisons, infinity the second.
    if column is None or (column.size and not (column.min() >= 0 and column.max() <= MAX_FRACTION)):
        for index, value in enumerate(_given_values(values)):
            if not _is_fraction(value):
                raise InvalidInput(
                    f"nodes[{index}].{field}",
                    f"must be a finite number between 0 and {MAX_FRACTION:g}, got {value!r}",
                    node=names[index],
                )
        raise InvalidInput(field, f"must hold finite numbers between 0 and {MAX_FRACTION:g}")
    column.flags.writeable = False
    return column


def check_request(request: PlacementRequest) -> None:
    """Reject a malformed request (`count`, `nodes_limit`) the same way in every mode."""
    for field, value in (("count", request.count), ("nodes_limit", request.nodes_limit)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInput(field, f"must be an integer, got {value!r}")
        if not 0 <= value <= MAX_INSTANCES:
            raise InvalidInput(field, f"must be between 0 and {MAX_INSTANCES}, got {value}")


def per_node_room(nodes: SlotArrays, nodes_limit: int) -> IntArray:
    """New instances each node can take: its capacity, and with `nodes_limit` > 0 at most that many old + new."""
    if nodes_limit == 0:
        return nodes.capacity
    return np.minimum(np.maximum(nodes_limit - nodes.count, 0), nodes.capacity)


def insufficient_room(mode: str, nodes: SlotArrays, room: IntArray, request: PlacementRequest) -> PlanningFailure:
    """The failure of a mode that spreads `request.count` instances over nodes whose total room is too small."""
    nodes.check_unique_names()
    available = int(room.sum())
    capacity_total = int(nodes.capacity.sum())
    limited = request.nodes_limit > 0 and capacity_total >= request.count
    per_node = {
        name: {"capacity": capacity, "existing": existing, "available": free}
        for name, capacity, existing, free in zip(
            nodes.names, nodes.capacity.tolist(), nodes.count.tolist(), room.tolist(), strict=True
        )
    }
    if limited:
        message = (
            f"{mode}: need {request.count} new instances but nodes_limit {request.nodes_limit} per node leaves room "
            f"for {available} on {nodes.size} nodes (their capacity alone would take {capacity_total})"
        )
        code = "nodes_limit_reached"
    else:
        message = f"{mode}: need {request.count} new instances but {nodes.size} nodes have capacity for {available}"
        code = "insufficient_capacity"
    return PlanningFailure(
        message,
        code=code,
        mode=mode,
        need=request.count,
        available=available,
        capacity_total=capacity_total,
        nodes_limit=request.nodes_limit,
        per_node=per_node,
    )


ArrayMode = Callable[[SlotArrays, PlacementRequest], dict[str, int]]

_ARRAY_MODES: dict[str, ArrayMode] = {}


QuickMode = Callable[[Sequence[Any], Column, "Column | None", PlacementRequest], "dict[str, int] | None"]
"""A mode's direct answer over plain columns (names, capacity, count or None, the request) for the inputs it can
read off without arrays, else None (then the arrays decide: same answer, or the error naming the field)."""
_QUICK_MODES: dict[str, QuickMode] = {}


def register_quick_path(name: str) -> Callable[[QuickMode], QuickMode]:
    """Decorator: `place_arrays` asks this function first for mode `name` (see `QuickMode`)."""

    def decorate(quick: QuickMode) -> QuickMode:
        _QUICK_MODES[name] = quick
        return quick

    return decorate


def register_array_mode(name: str) -> Callable[[ArrayMode], ArrayMode]:
    """Decorator: register a column-based mode under `name`, for `place_arrays` and (converted) for `place`."""

    def decorate(mode: ArrayMode) -> ArrayMode:
        _ARRAY_MODES[name] = mode

        def on_slots(slots: Sequence[NodeSlot], request: PlacementRequest) -> dict[str, int]:
            return mode(SlotArrays.from_slots(slots), request)

        on_slots.__name__ = f"{mode.__name__}_on_slots"
        on_slots.__doc__ = mode.__doc__
        register_mode(name)(on_slots)
        return mode

    return decorate


def place_arrays(
    mode: str,
    names: Sequence[str],
    capacity: Column,
    count: Column | None,
    usage: Column | None,
    rate: Column | None,
    request: PlacementRequest,
) -> dict[str, int]:
    """`place` for callers that hold columns: same validation, same answer, no `NodeSlot` objects built.

    A column the mode does not read may be None (`count` for `each`; `usage` and `rate` for all but `global` and
    `drained`); one it reads is an `InvalidInput` on that field. Modes registered only with `register_mode` get
    slots built from the columns (absent ones as the `NodeSlot` defaults).
    """
    quick = _QUICK_MODES.get(mode)
    if quick is not None:
        answer = quick(names, capacity, count, request)
        if answer is not None:
            return answer
    check_request(request)
    array_mode = _ARRAY_MODES.get(mode)
    nodes = SlotArrays.from_columns(names, capacity, count, usage, rate)
    if array_mode is not None:
        return array_mode(nodes, request)
    zeros = [0] * nodes.size
    slots = [
        NodeSlot(*fields)
        for fields in zip(
            nodes.names,
            nodes.capacity.tolist(),
            zeros if count is None else nodes.count.tolist(),
            zeros if usage is None else nodes.usage.tolist(),
            zeros if rate is None else nodes.rate.tolist(),
            strict=True,
        )
    ]
    return get_mode(mode)(slots, request)
