"""Per-node capacity and concrete plans (docs/planning.md): `node_capacity`, `node_capacities`, `placement_slots`,
`materialize`.

A node is analysed once per call: its capacity comes from arithmetic over classes of identical cores (`cores.solve`),
and concrete plans are built only for the instances actually placed. Nodes with identical resources and usage within
one call share one analysis (and one list of cpu maps), which is what makes a pod of identical machines cheap.

NUMA (docs/planning.md): each NUMA node in ascending id order gets the plans that fit entirely inside it (its cores, its
memory, and the node's memory), then plans across NUMA nodes come from what is left. The fragment-core cap is node-wide.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence

from eru.errors import InvalidInput, PlanningFailure
from eru.planning.batch import batch_bound
from eru.planning.cores import (
    Core,
    CoreSolution,
    Shape,
    build_plans,
    groups_of_free,
    order_cores,
    solve,
    solve_groups,
)
from eru.planning.modes import NodeSlot
from eru.planning.request import NormalizedRequest, PlanningConfig
from eru.planning.resources import (
    ContainerPlan,
    NodeResources,
    free_cpu,
    free_memory,
    id_sort_key,
    make_plan,
    node_positions,
)

UNBOUNDED = 1 << 62
_FREE = operator.itemgetter(1)
MAX_NUMA_PLANS = 1_000_000
_NO_CPU: Mapping[str, int] = {}


class NodeAnalysis:
    """One node's capacity for a request and, on demand, its plans in allocation order (cpu map, numa node)."""

    __slots__ = ("_built", "_lazy", "_ready", "capacity")

    def __init__(
        self,
        capacity: int,
        ready: list[tuple[Mapping[str, int], str | None]],
        lazy: tuple[CoreSolution, Shape, Callable[[], Sequence[Core]]] | None = None,
    ) -> None:
        self.capacity = capacity
        self._ready = ready
        self._lazy = lazy
        self._built: list[tuple[Mapping[str, int], str | None]] = []

    def plans(self, count: int) -> list[tuple[Mapping[str, int], str | None]]:
        """The first `count` plans (count ≤ capacity)."""
        ready = len(self._ready)
        if count <= ready or self._lazy is None:
            return self._ready[:count]
        if len(self._built) < count - ready:
            solution, shape, ordered = self._lazy
            # Build at least a few more than asked: callers often come back for the next ones.
            wanted = min(solution.plans, max(count - ready, 2 * len(self._built)))
            # in place: capped views of this analysis (batch allowances, `_bounded`) share the list
            self._built[:] = zip(build_plans(solution, ordered(), shape, wanted), itertools.repeat(None))
        return self._ready + self._built[: count - ready]


class MemoryPrimeAnalysis(NodeAnalysis):
    """Memory-prime: every plan is the same (no cores, no NUMA node)."""

    __slots__ = ()

    def plans(self, count: int) -> list[tuple[Mapping[str, int], str | None]]:
        """`count` identical plans."""
        return [(_NO_CPU, None)] * min(count, self.capacity)


def analyse(
    node: NodeResources,
    request: NormalizedRequest,
    config: PlanningConfig,
    orders: dict[tuple[str, ...], bool] | None = None,
) -> NodeAnalysis:
    """Capacity and plans of one node for `request`; `orders` caches, per tuple of core ids, whether the ids already
    come in preference order (shared by the nodes of one call). A batch request is further bounded by the node's
    batch allowance (`eru.planning.batch`): its plans are the first ones of the ordinary analysis."""
    return _bounded(_analyse_resources(node, request, config, orders), node, request)


def _bounded(analysis: NodeAnalysis, node: NodeResources, request: NormalizedRequest) -> NodeAnalysis:
    """`analysis` capped by the node's batch allowance (a batch request): a view sharing the same plans, so nodes
    with equal resources but different allowances still share one analysis."""
    if request.batch:
        bound = batch_bound(node, request)
        if bound is not None and bound < analysis.capacity:
            view = type(analysis)(bound, analysis._ready, analysis._lazy)
            view._built = analysis._built
            return view
    return analysis


def _analyse_resources(
    node: NodeResources,
    request: NormalizedRequest,
    config: PlanningConfig,
    orders: dict[tuple[str, ...], bool] | None,
) -> NodeAnalysis:
    memory_request = request.memory_request
    if not request.cpu_bind:
        if len(node.cpu_map) * config.share_base < request.cpu_request:
            return MemoryPrimeAnalysis(0, [])
        capacity = free_memory(node) // memory_request if memory_request else config.max_deploy_count
        return MemoryPrimeAnalysis(capacity, [])
    base = config.share_base
    shape = Shape.of(request.cpu_request, base)
    memory_left = free_memory(node)
    cap = config.fragment_cap
    if not node.numa:
        # Capacity needs only how many cores have each amount of free pieces; ids matter only for the plans.
        groups = groups_of_free(Counter(_free_values(node)), base)
        budget = None
        if cap is not None:
            budget = max(0, cap - sum(fixed for _, fixed, _ in groups))
        plans, taken = solve_groups(groups, budget, shape, _memory_bound(memory_left, memory_request))
        solution = CoreSolution(plans, taken)
        cache = {} if orders is None else orders
        return NodeAnalysis(plans, [], (solution, shape, lambda: _ordered_free(node, cache)))
    key = id_sort_key(node.cpu_map)
    free = free_cpu(node)
    fragmented = {core for core, pieces in free.items() if pieces % base}
    ready: list[tuple[Mapping[str, int], str | None]] = []
    numa_ids = sorted(set(node.numa.values()), key=id_sort_key(node.numa.values()))
    for numa_id in numa_ids:
        cores = order_cores([(core, free[core]) for core, owner in node.numa.items() if owner == numa_id], key)
        available = memory_left
        if numa_id in node.numa_memory:
            numa_free = node.numa_memory[numa_id] - node.used_numa_memory.get(numa_id, 0)
            available = min(available, max(0, numa_free))
        budget = None if cap is None else max(0, cap - len(fragmented))
        solution = solve(cores, frozenset(fragmented), budget, shape, _memory_bound(available, memory_request))
        if solution.plans > MAX_NUMA_PLANS:
            raise InvalidInput(
                f"nodes.{node.name}.numa",
                f"NUMA node {numa_id} would hold {solution.plans} plans (at most {MAX_NUMA_PLANS} per NUMA node)",
                node=node.name,
            )
        for cpu_map in build_plans(solution, cores, shape, solution.plans):
            for core, pieces in cpu_map.items():
                free[core] -= pieces
                if pieces != base:
                    fragmented.add(core)
            ready.append((cpu_map, numa_id))
        memory_left -= solution.plans * memory_request
    budget = None if cap is None else max(0, cap - len(fragmented))
    cores = order_cores(list(free.items()), key)
    solution = solve(cores, frozenset(fragmented), budget, shape, _memory_bound(memory_left, memory_request))
    return NodeAnalysis(len(ready) + solution.plans, ready, (solution, shape, lambda: cores))


def _free_values(node: NodeResources) -> Iterable[int]:
    if not node.used_cpu_map:
        return node.cpu_map.values()
    charged = dict(node.cpu_map)
    for core, amount in node.used_cpu_map.items():
        if core in charged:
            charged[core] -= amount
    return charged.values()


def _ordered_free(node: NodeResources, orders: dict[tuple[str, ...], bool]) -> list[Core]:
    """(core, free pieces) with free > 0, fewest free first, then by id — with C-level sorts: when the node lists its
    cores in id order (the usual case, checked once per set of ids), a stable sort on free pieces is enough."""
    cpu_map = node.cpu_map
    free: Mapping[str, int] = cpu_map
    if node.used_cpu_map:
        charged = dict(cpu_map)
        for core, amount in node.used_cpu_map.items():
            if core in charged:
                charged[core] -= amount
        free = charged
    ids = tuple(cpu_map)
    in_order = orders.get(ids)
    if in_order is None:
        key = id_sort_key(ids)
        in_order = orders[ids] = list(ids) == sorted(ids, key=key)
    items: Iterable[Core] = free.items()
    if not in_order:
        key = id_sort_key(ids)
        items = sorted(items, key=lambda item: key(item[0]))
    ordered = sorted(items, key=_FREE)
    return ordered[bisect.bisect_right(ordered, 0, key=_FREE) :]


def _memory_bound(available: int, memory_request: int) -> int:
    return available // memory_request if memory_request else UNBOUNDED


def _node_key(node: NodeResources, cpu_bind: bool) -> Hashable:
    if not cpu_bind:
        return (len(node.cpu_map), node.memory - node.used_memory)
    # Flat tuples of keys and values hash several times faster than tuples of item pairs.
    return (
        tuple(node.cpu_map),
        tuple(node.cpu_map.values()),
        tuple(node.used_cpu_map),
        tuple(node.used_cpu_map.values()),
        node.memory - node.used_memory,
        tuple(node.numa.items()) if node.numa else (),
        tuple(node.numa_memory.items()) if node.numa_memory else (),
        tuple(node.used_numa_memory.items()) if node.used_numa_memory else (),
    )


def analyse_nodes(
    nodes: Sequence[NodeResources],
    request: NormalizedRequest,
    config: PlanningConfig,
    orders: dict[tuple[str, ...], bool] | None = None,
) -> list[NodeAnalysis]:
    """One analysis per node, in input order; nodes with identical resources and usage share one. `orders` (per
    tuple of core ids, whether they come in preference order) may be kept by the caller across calls: a batch's
    nodes keep their core ids, so the check runs once per node instead of once per plan built."""
    seen: dict[Hashable, NodeAnalysis] = {}
    orders = {} if orders is None else orders
    result: list[NodeAnalysis] = []
    cpu_bind, batch = request.cpu_bind, request.batch
    for node in nodes:
        key = _node_key(node, cpu_bind)
        analysis = seen.get(key)
        if analysis is None:
            analysis = seen[key] = _analyse_resources(node, request, config, orders)
        result.append(_bounded(analysis, node, request) if batch else analysis)
    return result


def node_capacity(node: NodeResources, request: NormalizedRequest, config: PlanningConfig) -> int:
    """How many more instances of `request` the node can host at once."""
    return analyse(node, request, config).capacity


def node_capacities(
    nodes: Sequence[NodeResources], request: NormalizedRequest, config: PlanningConfig
) -> dict[str, int]:
    """{node name: capacity}, in input order."""
    analyses = analyse_nodes(nodes, request, config)
    return {node.name: analysis.capacity for node, analysis in zip(nodes, analyses, strict=True)}


def node_usage(node: NodeResources, request: NormalizedRequest) -> tuple[float, float]:
    """(usage, rate) of the node's primary resource: CPU pieces for cpu_bind, memory otherwise (0 when it has none)."""
    if request.cpu_bind:
        total = sum(node.cpu_map.values())
        used = sum(node.used_cpu_map.values())
        amount = request.cpu_request
    else:
        total, used, amount = node.memory, node.used_memory, request.memory_request
    if total <= 0:
        return 0.0, 0.0
    return used / total, amount / total


def slots_from_analyses(
    nodes: Sequence[NodeResources],
    analyses: Sequence[NodeAnalysis],
    request: NormalizedRequest,
    counts: Mapping[str, int],
) -> list[NodeSlot]:
    """Placement input for already analysed nodes."""
    return [
        NodeSlot(node.name, analysis.capacity, counts.get(node.name, 0), *node_usage(node, request))
        for node, analysis in zip(nodes, analyses, strict=True)
    ]


def usage_columns(nodes: Sequence[NodeResources], request: NormalizedRequest) -> tuple[list[float], list[float]]:
    """(usage, rate) columns, in node order: see `node_usage`."""
    if request.cpu_bind:
        pairs = [node_usage(node, request) for node in nodes]
        return [usage for usage, _ in pairs], [rate for _, rate in pairs]
    amount = request.memory_request
    usage = [node.used_memory / node.memory if node.memory > 0 else 0.0 for node in nodes]
    rate = [amount / node.memory if node.memory > 0 else 0.0 for node in nodes]
    return usage, rate


def placement_slots(
    nodes: Sequence[NodeResources], request: NormalizedRequest, config: PlanningConfig, counts: Mapping[str, int]
) -> list[NodeSlot]:
    """What the placement modes see per node (capacity, existing count, usage, rate), in input order."""
    return slots_from_analyses(nodes, analyse_nodes(nodes, request, config), request, counts)


def check_placements(nodes: Sequence[NodeResources], placements: Mapping[str, int]) -> None:
    """Every placed node exists and every count is a non-negative integer."""
    names = {node.name for node in nodes}
    for name, count in placements.items():
        if name not in names:
            raise InvalidInput(f"placements.{name}", "no such node in the input")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidInput(f"placements.{name}", f"expected a non-negative integer, got {count!r}")


def materialize_analysed(
    nodes: Sequence[NodeResources],
    analyses: Sequence[NodeAnalysis],
    request: NormalizedRequest,
    placements: Mapping[str, int],
) -> list[ContainerPlan]:
    """Concrete plans for `placements` over already analysed nodes (node input order, first k plans each)."""
    memory = request.memory_request
    result: list[ContainerPlan] = []
    placed = 0
    get = placements.get
    pairs: Iterable[tuple[NodeResources, NodeAnalysis]] = zip(nodes, analyses, strict=True)
    if len(placements) < len(nodes) and len(nodes) == len(analyses):
        positions = node_positions(nodes, [name for name, count in placements.items() if count])
        if positions is not None:  # only the placed nodes, in node order (not a pass over every node)
            pairs = [(nodes[at], analyses[at]) for at in positions]
    for node, analysis in pairs:
        count = get(node.name, 0)
        if not count:
            continue
        placed += count
        if count > analysis.capacity:
            raise PlanningFailure(
                f"node {node.name} can host {analysis.capacity} more instances, {count} were placed on it",
                code="insufficient_resource",
                node=node.name,
                need=count,
                available=analysis.capacity,
            )
        name = node.name
        if isinstance(analysis, MemoryPrimeAnalysis):
            # Memory-prime plans of one node are all equal: one immutable plan, listed `count` times.
            result.extend([make_plan(name, {}, None, memory)] * count)
        else:
            result.extend([make_plan(name, cpu_map, numa, memory) for cpu_map, numa in analysis.plans(count)])
    if placed != sum(placements.values()):
        check_placements(nodes, placements)
    return result


def materialize(
    nodes: Sequence[NodeResources],
    request: NormalizedRequest,
    config: PlanningConfig,
    placements: Mapping[str, int],
) -> list[ContainerPlan]:
    """The first k plans of each node for placements {node: k}, in node input order."""
    check_placements(nodes, placements)
    wanted = [node for node in nodes if placements.get(node.name)]
    return materialize_analysed(wanted, analyse_nodes(wanted, request, config), request, placements)
