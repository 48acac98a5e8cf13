"""Node snapshots and concrete allocations: `NodeResources`, `ContainerPlan`, `charge`, `release`.

Everything here is immutable: charging or releasing returns a new snapshot. Core and NUMA ids are strings; they sort
numerically when every id of the kind on the node is an integer, otherwise as strings (docs/planning.md).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Any

from eru.errors import InvalidInput
from eru.planning.request import MAX_BYTES, MAX_PIECES
from eru.units import cpu_to_pieces, parse_bytes


@dataclass(frozen=True, slots=True)
class NodeResources:
    """One node's capacity (`cpu_map` core → pieces, `memory` bytes, optional NUMA layout) and current usage.

    `batch_cpu` (pieces) and `batch_memory` (bytes) are the node's reclaimed allowance for `batch` requests
    (docs/colocation.md); None = no bound from that resource. Other requests ignore them.
    """

    name: str
    cpu_map: Mapping[str, int]
    memory: int
    numa: Mapping[str, str] = field(default_factory=dict)
    numa_memory: Mapping[str, int] = field(default_factory=dict)
    used_cpu_map: Mapping[str, int] = field(default_factory=dict)
    used_memory: int = 0
    used_numa_memory: Mapping[str, int] = field(default_factory=dict)
    batch_cpu: int | None = None
    batch_memory: int | None = None


@dataclass(frozen=True, slots=True)
class ContainerPlan:
    """One instance's concrete allocation. `cpu_map` is {} for memory-prime plans; treat it as read-only (identical
    plans on identical nodes may share one mapping)."""

    node: str
    cpu_map: Mapping[str, int]
    numa_node: str | None
    memory: int

    def to_dict(self) -> dict[str, object]:
        """JSON form, as in `eru plan` answers."""
        return {"node": self.node, "cpu_map": dict(self.cpu_map), "numa_node": self.numa_node, "memory": self.memory}


_new_object = object.__new__
_set_node, _set_cpu_map, _set_numa_node, _set_memory = (
    vars(ContainerPlan)[name].__set__ for name in ("node", "cpu_map", "numa_node", "memory")
)


def make_plan(node: str, cpu_map: Mapping[str, int], numa_node: str | None, memory: int) -> ContainerPlan:
    """`ContainerPlan(node, cpu_map, numa_node, memory)`, about twice as fast: a deploy creates one per instance, and
    the frozen dataclass's generated __init__ goes through object.__setattr__ per field. Writes the slots directly."""
    plan: ContainerPlan = _new_object(ContainerPlan)
    _set_node(plan, node)
    _set_cpu_map(plan, cpu_map)
    _set_numa_node(plan, numa_node)
    _set_memory(plan, memory)
    return plan


def id_sort_key(ids: Iterable[str]) -> Callable[[str], tuple[int, str]]:
    """Sort key for core or NUMA ids: numeric when every id is an integer, else by string."""
    if all(_is_int(value) for value in ids):
        return lambda value: (int(value), "")
    return lambda value: (0, value)


def _is_int(value: str) -> bool:
    return value.isdigit() or (value[:1] == "-" and value[1:].isdigit())


def free_cpu(node: NodeResources) -> dict[str, int]:
    """Free pieces per core (never below 0: capacity may have been lowered under usage, docs/planning.md)."""
    used = node.used_cpu_map
    if not used:
        return {core: pieces if pieces > 0 else 0 for core, pieces in node.cpu_map.items()}
    result: dict[str, int] = {}
    for core, pieces in node.cpu_map.items():
        left = pieces - used.get(core, 0)
        result[core] = left if left > 0 else 0
    return result


def free_memory(node: NodeResources) -> int:
    """Free bytes on the node (never below 0)."""
    return max(0, node.memory - node.used_memory)


def charge(node: NodeResources, plans: Sequence[ContainerPlan]) -> NodeResources:
    """The node with `plans` added to its usage (the caller checked that they fit)."""
    if not plans:
        return node
    used_cpu = dict(node.used_cpu_map)
    used_numa = dict(node.used_numa_memory)
    memory = node.used_memory
    for plan in plans:
        for core, pieces in plan.cpu_map.items():
            used_cpu[core] = used_cpu.get(core, 0) + pieces
        memory += plan.memory
        if plan.numa_node is not None:
            used_numa[plan.numa_node] = used_numa.get(plan.numa_node, 0) + plan.memory
    # the constructor, not `dataclasses.replace` (several times slower): a batch charges a node per request
    return NodeResources(
        node.name,
        node.cpu_map,
        node.memory,
        node.numa,
        node.numa_memory,
        used_cpu,
        memory,
        used_numa,
        node.batch_cpu,
        node.batch_memory,
    )


def release(node: NodeResources, plan: ContainerPlan) -> NodeResources:
    """The node with `plan` taken out of its usage; no amount goes below 0."""
    used_cpu = dict(node.used_cpu_map)
    for core, pieces in plan.cpu_map.items():
        left = used_cpu.get(core, 0) - pieces
        if left > 0:
            used_cpu[core] = left
        else:
            used_cpu.pop(core, None)
    used_numa = dict(node.used_numa_memory)
    if plan.numa_node is not None:
        left_numa = used_numa.get(plan.numa_node, 0) - plan.memory
        if left_numa > 0:
            used_numa[plan.numa_node] = left_numa
        else:
            used_numa.pop(plan.numa_node, None)
    memory = max(0, node.used_memory - plan.memory)
    return replace(node, used_cpu_map=used_cpu, used_memory=memory, used_numa_memory=used_numa)


def node_to_mapping(node: NodeResources) -> dict[str, Any]:
    """A node snapshot in the `eru plan` JSON form (capacity and `used`), the inverse of `node_from_mapping` for
    everything but the batch allowance (which needs the share base: see `eru.planning.batch`)."""
    return {
        "name": node.name,
        "cpu_map": dict(node.cpu_map),
        "memory": node.memory,
        "numa": dict(node.numa),
        "numa_memory": dict(node.numa_memory),
        "used": {
            "cpu_map": dict(node.used_cpu_map),
            "memory": node.used_memory,
            "numa_memory": dict(node.used_numa_memory),
        },
    }


def node_from_mapping(raw: Mapping[str, object], field: str, share_base: int = 100) -> NodeResources:
    """A resource node from JSON (docs/planning.md shape: `name`, `cpu_map`, `memory`, `numa`, `numa_memory`, `used`,
    and the optional batch allowance `batch`: {"cpu": cores, "memory": bytes}, at `share_base` pieces per core)."""
    if not isinstance(raw, Mapping):
        raise InvalidInput(field, f"expected an object, got {type(raw).__name__}")
    known = {"name", "cpu_map", "memory", "numa", "numa_memory", "used", "count", "batch"}
    for key in raw:
        if key not in known:
            raise InvalidInput(
                f"{field}.{key}", f"unknown field for a resource node (known: {', '.join(sorted(known))})"
            )
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"{field}.name", f"expected a non-empty string, got {name!r}")
    if "cpu_map" not in raw or "memory" not in raw:
        raise InvalidInput(
            field, "a resource node needs `cpu_map` and `memory` (or give `capacity` instead)", node=name
        )
    cpu_map = pieces_map(raw["cpu_map"], f"{field}.cpu_map")
    memory = byte_amount(raw["memory"], f"{field}.memory")
    numa = _string_map(raw.get("numa", {}), f"{field}.numa")
    for core in numa:
        if core not in cpu_map:
            raise InvalidInput(f"{field}.numa.{core}", f"core {core!r} is not in cpu_map", node=name)
    numa_memory = {
        key: byte_amount(value, f"{field}.numa_memory.{key}")
        for key, value in _mapping(raw.get("numa_memory", {}), f"{field}.numa_memory").items()
    }
    used = _mapping(raw.get("used", {}), f"{field}.used")
    for key in used:
        if key not in ("cpu_map", "memory", "numa_memory"):
            raise InvalidInput(f"{field}.used.{key}", "unknown field (known: cpu_map, memory, numa_memory)")
    used_cpu = pieces_map(used.get("cpu_map", {}), f"{field}.used.cpu_map")
    for core in used_cpu:
        if core not in cpu_map:
            raise InvalidInput(f"{field}.used.cpu_map.{core}", f"core {core!r} is not in cpu_map", node=name)
    used_numa = {
        key: byte_amount(value, f"{field}.used.numa_memory.{key}")
        for key, value in _mapping(used.get("numa_memory", {}), f"{field}.used.numa_memory").items()
    }
    used_memory = byte_amount(used.get("memory", 0), f"{field}.used.memory")
    batch_cpu, batch_memory = _batch_allowance(raw.get("batch"), f"{field}.batch", share_base)
    return NodeResources(
        name, cpu_map, memory, numa, numa_memory, used_cpu, used_memory, used_numa, batch_cpu, batch_memory
    )


def _batch_allowance(raw: object, field: str, share_base: int) -> tuple[int | None, int | None]:
    """(pieces, bytes) of a node's `batch` allowance; a missing key (or the whole object missing) means no bound."""
    if raw is None:
        return None, None
    values = _mapping(raw, field)
    for key in values:
        if key not in ("cpu", "memory"):
            raise InvalidInput(f"{field}.{key}", "unknown field (known: cpu, memory)")
    cpu = None
    if values.get("cpu") is not None:
        cpu = cpu_to_pieces(values["cpu"], share_base, f"{field}.cpu")
        if not 0 <= cpu <= MAX_PIECES:
            raise InvalidInput(
                f"{field}.cpu", f"must be within 0..{MAX_PIECES // share_base} cores, got {cpu / share_base}"
            )
    memory = None if values.get("memory") is None else byte_amount(values["memory"], f"{field}.memory")
    return cpu, memory


def pieces_map(raw: object, field: str) -> dict[str, int]:
    """{core id: pieces} with non-negative integer pieces."""
    result: dict[str, int] = {}
    for core, value in _mapping(raw, field).items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInput(f"{field}.{core}", f"expected an integer number of pieces, got {value!r}")
        if not 0 <= value <= MAX_PIECES:
            raise InvalidInput(f"{field}.{core}", f"must be within 0..{MAX_PIECES} pieces, got {value}")
        result[core] = value
    return result


_NAME = attrgetter("name")


def node_positions(nodes: Sequence[NodeResources], names: Iterable[str]) -> list[int] | None:
    """The positions in `nodes` of the nodes named `names`, ascending, found by bisection (O(log n) each, for a
    snapshot's nodes, which are sorted by name); None when some name is not found that way (`nodes` not sorted, or the
    name not among them): the caller then passes over every node as before. Node names are unique (every input
    refuses duplicates), so a position found is the one node of that name and the answer is exact."""
    found: list[int] = []
    end = len(nodes)
    for name in names:
        at = bisect_left(nodes, name, key=_NAME)
        if at == end or nodes[at].name != name:
            return None
        found.append(at)
    found.sort()
    return found


def byte_amount(value: object, field: str) -> int:
    """Non-negative bytes from an integer or a human string."""
    amount = parse_bytes(value, field)
    if not 0 <= amount <= MAX_BYTES:
        raise InvalidInput(field, f"must be within 0..{MAX_BYTES} bytes, got {amount}")
    return amount


def _mapping(raw: object, field: str) -> Mapping[str, object]:
    if not isinstance(raw, Mapping):
        raise InvalidInput(field, f"expected an object, got {type(raw).__name__}")
    for key in raw:
        if not isinstance(key, str):
            raise InvalidInput(field, f"ids must be strings, got {key!r}")
    return raw


def _string_map(raw: object, field: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for key, value in _mapping(raw, field).items():
        if not isinstance(value, str):
            raise InvalidInput(f"{field}.{key}", f"expected a string id, got {value!r}")
        result[key] = value
    return result
