"""Realloc planning (docs/planning.md): change the resources of running containers by deltas, keeping their cores.

The containers of one node that share a final requirement form a group: their current allocations go back to the
node, then each gets a new plan, preferring the cores it already holds (whole cores first), NUMA-first as in
docs/planning.md. Either the whole group fits or nothing changes. When the affinity-first walk cannot place every member
but the node's capacity says the group fits, the group takes the node's first plans instead (fitting beats affinity).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from eru.errors import InvalidInput, PlanningFailure
from eru.planning.capacity import analyse
from eru.planning.cores import Shape
from eru.planning.request import NormalizedRequest, PlanningConfig, apply_rules, byte_field, flag, pieces
from eru.planning.resources import (
    ContainerPlan,
    NodeResources,
    byte_amount,
    charge,
    free_cpu,
    free_memory,
    id_sort_key,
    pieces_map,
)

ORIGIN_FIELDS = ("cpu_bind", "cpu_request", "cpu_limit", "memory_request", "memory_limit", "memory_soft")


@dataclass(frozen=True, slots=True)
class RunningContainer:
    """A running container as realloc sees it: its normalised resources and its allocation on the node."""

    request: NormalizedRequest
    cpu_map: Mapping[str, int] = field(default_factory=dict)
    numa_node: str | None = None
    numa_memory: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ResourceDelta:
    """A realloc request: CPU deltas in pieces, memory deltas in bytes; `cpu_bind`/`memory_soft` absolute (None =
    keep the container's); `keep_cpu_bind` keeps a bound container bound."""

    cpu_request: int = 0
    cpu_limit: int = 0
    memory_request: int = 0
    memory_limit: int = 0
    cpu_bind: bool | None = None
    keep_cpu_bind: bool = False
    memory_soft: bool | None = None


@dataclass(frozen=True, slots=True)
class ReallocResult:
    """The final requirement and new allocation of each container (input order), and the node charged with them."""

    requests: list[NormalizedRequest]
    plans: list[ContainerPlan]
    node: NodeResources


def final_request(origin: NormalizedRequest, delta: ResourceDelta, config: PlanningConfig) -> NormalizedRequest:
    """new = current + delta, then the rules of docs/planning.md; a negative or invalid result is `InvalidInput`."""
    cpu_bind = origin.cpu_bind if delta.cpu_bind is None else delta.cpu_bind
    if delta.keep_cpu_bind and origin.cpu_bind:
        cpu_bind = True
    memory_soft = origin.memory_soft if delta.memory_soft is None else delta.memory_soft
    base = config.share_base
    sums = {
        "cpu_request": origin.cpu_request + delta.cpu_request,
        "cpu_limit": origin.cpu_limit + delta.cpu_limit,
        "memory_request": origin.memory_request + delta.memory_request,
        "memory_limit": origin.memory_limit + delta.memory_limit,
    }
    for name, amount in sums.items():
        if amount < 0:
            current, change = getattr(origin, name), getattr(delta, name)
            if name.startswith("cpu"):
                current, change, amount = current / base, change / base, amount / base  # type: ignore[assignment]
            raise InvalidInput(
                f"request.{name}",
                f"current {current} + delta {change} = {amount} is negative",
                current=current,
                delta=change,
                result=amount,
            )
    return apply_rules(
        cpu_bind,
        sums["cpu_request"],
        sums["cpu_limit"],
        sums["memory_request"],
        sums["memory_limit"],
        memory_soft,
        base,
    )


def plan_realloc(
    node: NodeResources, origin: RunningContainer, delta: ResourceDelta, config: PlanningConfig
) -> ReallocResult:
    """Realloc one container on `node` (whose usage includes it)."""
    return plan_realloc_group(node, [origin], delta, config)


def plan_realloc_group(
    node: NodeResources, origins: Sequence[RunningContainer], delta: ResourceDelta, config: PlanningConfig
) -> ReallocResult:
    """Realloc every container in `origins` (all on `node`) by `delta`: all fit, or `PlanningFailure`."""
    requests = [final_request(origin.request, delta, config) for origin in origins]
    released = node
    for index, origin in enumerate(origins):
        released = _release_origin(released, origin, f"origin[{index}]" if len(origins) > 1 else "origin")
    plans: list[ContainerPlan] = []
    current = released
    for origin, request in zip(origins, requests, strict=True):
        plan = _plan_one(current, origin, request, config)
        if plan is None:
            break
        plans.append(plan)
        current = charge(current, [plan])
    if len(plans) < len(origins):
        plans = _plans_without_affinity(released, requests, config, len(origins))
        current = charge(released, plans)
    return ReallocResult(requests, plans, current)


def _plans_without_affinity(
    node: NodeResources, requests: Sequence[NormalizedRequest], config: PlanningConfig, size: int
) -> list[ContainerPlan]:
    """The node's first plans when affinity could not place the group; otherwise the failure with the numbers."""
    request = requests[0]
    if any(other != request for other in requests):
        raise PlanningFailure(
            f"node {node.name} cannot host the new requirements of {size} containers",
            code="insufficient_resource",
            node=node.name,
            need=size,
        )
    analysis = analyse(node, request, config)
    if analysis.capacity < size:
        base = config.share_base
        raise PlanningFailure(
            f"node {node.name} can host {analysis.capacity} of the {size} reallocated containers "
            f"(cpu {request.cpu_request / base} cores bound={request.cpu_bind}, memory {request.memory_request} bytes;"
            f" free memory {free_memory(node)} bytes, free cpu {sum(free_cpu(node).values()) / base} cores)",
            code="insufficient_resource",
            node=node.name,
            need=size,
            available=analysis.capacity,
            free_memory=free_memory(node),
            free_cpu=sum(free_cpu(node).values()) / base,
            memory_request=request.memory_request,
            cpu_request=request.cpu_request / base,
        )
    return [ContainerPlan(node.name, cpu_map, numa, request.memory_request) for cpu_map, numa in analysis.plans(size)]


def _release_origin(node: NodeResources, origin: RunningContainer, field_name: str) -> NodeResources:
    used_cpu = dict(node.used_cpu_map)
    for core, amount in origin.cpu_map.items():
        if core not in node.cpu_map:
            raise InvalidInput(f"{field_name}.cpu_map.{core}", f"core {core!r} is not on node {node.name}")
        held = used_cpu.get(core, 0)
        if amount > held:
            raise InvalidInput(
                f"{field_name}.cpu_map.{core}",
                f"the container holds {amount} pieces but the node's usage of core {core} is {held}",
                held=amount,
                used=held,
            )
        used_cpu[core] = held - amount
    memory = origin.request.memory_request
    if memory > node.used_memory:
        raise InvalidInput(
            f"{field_name}.memory_request",
            f"the container holds {memory} bytes but the node's usage is {node.used_memory}",
            held=memory,
            used=node.used_memory,
        )
    numa_held = dict(origin.numa_memory)
    if not numa_held and origin.numa_node is not None:
        numa_held = {origin.numa_node: memory}
    used_numa = dict(node.used_numa_memory)
    for numa_id, amount in numa_held.items():
        used_numa[numa_id] = max(0, used_numa.get(numa_id, 0) - amount)
    return replace(node, used_cpu_map=used_cpu, used_memory=node.used_memory - memory, used_numa_memory=used_numa)


def _plan_one(
    node: NodeResources, origin: RunningContainer, request: NormalizedRequest, config: PlanningConfig
) -> ContainerPlan | None:
    """One plan for `request`, preferring the origin's cores; None when it does not fit this way."""
    memory_free = free_memory(node)
    if request.memory_request > memory_free:
        return None
    if not request.cpu_bind:
        if len(node.cpu_map) * config.share_base < request.cpu_request:
            return None
        return ContainerPlan(node.name, {}, None, request.memory_request)
    free = free_cpu(node)
    if node.numa:
        order_key = id_sort_key(node.numa.values())
        numa_ids = sorted(
            set(node.numa.values()), key=lambda numa_id: (numa_id != origin.numa_node, order_key(numa_id))
        )
        for numa_id in numa_ids:
            available = memory_free
            if numa_id in node.numa_memory:
                available = min(available, node.numa_memory[numa_id] - node.used_numa_memory.get(numa_id, 0))
            if request.memory_request > available:
                continue
            cores = {core: free[core] for core, owner in node.numa.items() if owner == numa_id}
            cpu_map = _affine_cpu_map(cores, free, origin, request, config)
            if cpu_map is not None:
                return ContainerPlan(node.name, cpu_map, numa_id, request.memory_request)
    cpu_map = _affine_cpu_map(free, free, origin, request, config)
    return None if cpu_map is None else ContainerPlan(node.name, cpu_map, None, request.memory_request)


def _affine_cpu_map(
    cores: Mapping[str, int],
    node_free: Mapping[str, int],
    origin: RunningContainer,
    request: NormalizedRequest,
    config: PlanningConfig,
) -> dict[str, int] | None:
    """W whole cores and at most one fragment core among `cores`, held cores first (whole ones first), then the
    most-loaded; a whole-source core turns into a fragment source only within max_fragment_cores."""
    base = config.share_base
    shape = Shape.of(request.cpu_request, base)
    key = id_sort_key(node_free)
    held = origin.cpu_map

    def preference(core: str) -> tuple[int, int, tuple[int, str]]:
        held_rank = 0 if held.get(core, 0) == base else 1 if core in held else 2
        return held_rank, cores[core], key(core)

    whole_sources = sorted((core for core, free in cores.items() if free >= base and free % base == 0), key=preference)
    fragment_options: list[tuple[str | None, bool]] = []
    if shape.fragment:
        fragment_options = [(core, False) for core, free in cores.items() if free % base and free >= shape.fragment]
        cap = config.fragment_cap
        if cap is None or sum(1 for free in node_free.values() if free % base) < cap:
            fragment_options += [(core, True) for core in whole_sources if cores[core] >= shape.fragment]

        def fragment_preference(option: tuple[str | None, bool]) -> tuple[int, bool, int, tuple[int, str]]:
            core = option[0] or ""
            pieces = held.get(core, 0)
            held_rank = 0 if 0 < pieces < base else 1 if pieces else 2  # the held fragment core first
            return held_rank, option[1], cores[core], key(core)

        fragment_options.sort(key=fragment_preference)
    if shape.fragment and not fragment_options:
        return None
    for fragment_core, converted in fragment_options or [(None, False)]:
        usable = [core for core in whole_sources if core != fragment_core] if converted else whole_sources
        if len(usable) < shape.whole:
            continue
        cpu_map = {core: base for core in usable[: shape.whole]}
        if fragment_core is not None:
            cpu_map[fragment_core] = shape.fragment
        return cpu_map
    return None


def origin_from_mapping(
    raw: Mapping[str, object], config: PlanningConfig, field_name: str = "origin"
) -> RunningContainer:
    """A running container from JSON (docs/planning.md `origin`): resources in cores/bytes, `cpu_map`, `numa_node`,
    `numa_memory` (bytes, or {numa id: bytes})."""
    if not isinstance(raw, Mapping):
        raise InvalidInput(field_name, f"expected an object, got {type(raw).__name__}")
    known = {*ORIGIN_FIELDS, "cpu_map", "numa_node", "numa_memory"}
    for name in raw:
        if name not in known:
            raise InvalidInput(f"{field_name}.{name}", f"unknown field (known: {', '.join(sorted(known))})")
    base = config.share_base
    request = apply_rules(
        flag(raw, "cpu_bind", field_name),
        pieces(raw, "cpu_request", base, field_name),
        pieces(raw, "cpu_limit", base, field_name),
        byte_field(raw, "memory_request", field_name),
        byte_field(raw, "memory_limit", field_name),
        flag(raw, "memory_soft", field_name),
        base,
        field_name,
    )
    cpu_map = pieces_map(raw.get("cpu_map", {}), f"{field_name}.cpu_map")
    numa_node = raw.get("numa_node")
    if numa_node is not None and not isinstance(numa_node, str):
        raise InvalidInput(f"{field_name}.numa_node", f"expected a string id or null, got {numa_node!r}")
    numa_raw = raw.get("numa_memory", {})
    numa_memory: dict[str, int] = {}
    if isinstance(numa_raw, Mapping):
        numa_memory = {
            str(key): byte_amount(value, f"{field_name}.numa_memory.{key}") for key, value in numa_raw.items()
        }
    elif numa_raw is not None:
        amount = byte_amount(numa_raw, f"{field_name}.numa_memory")
        if amount and numa_node is None:
            raise InvalidInput(f"{field_name}.numa_memory", "bytes on a NUMA node need `numa_node`")
        numa_memory = {numa_node: amount} if numa_node is not None and amount else {}
    return RunningContainer(request, cpu_map, numa_node, numa_memory)


def delta_from_mapping(raw: Mapping[str, object], config: PlanningConfig, field_name: str = "request") -> ResourceDelta:
    """A realloc request from JSON: deltas in cores/bytes (may be negative), absolute `cpu_bind`, `keep_cpu_bind`,
    `memory_soft`."""
    if not isinstance(raw, Mapping):
        raise InvalidInput(field_name, f"expected an object, got {type(raw).__name__}")
    known = {*ORIGIN_FIELDS, "keep_cpu_bind"}
    for name in raw:
        if name not in known:
            raise InvalidInput(f"{field_name}.{name}", f"unknown field (known: {', '.join(sorted(known))})")
    base = config.share_base
    return ResourceDelta(
        pieces(raw, "cpu_request", base, field_name),
        pieces(raw, "cpu_limit", base, field_name),
        byte_field(raw, "memory_request", field_name),
        byte_field(raw, "memory_limit", field_name),
        flag(raw, "cpu_bind", field_name) if "cpu_bind" in raw else None,
        flag(raw, "keep_cpu_bind", field_name),
        flag(raw, "memory_soft", field_name) if "memory_soft" in raw else None,
    )
