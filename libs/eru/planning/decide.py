"""The deploy decision (docs/pipeline.md "The decision"): `decide(snapshot, ask)` → `Plan` or `Rejection`, pure.

Three steps, each a function of immutable inputs, so the allocator can put the distributor (the service that
applies placement modes, over the bus) between the first and the last while `eru plan`, the plan API and `eru sim`
run all three in process:

1. `stage(snapshot, ask)`: the nodes the request may use (those its node filter matches, `eru.planning.node_filter`;
   batch requests: not where a condition forbids batch, not where the workload was evicted lately), each as the
   request's tenant sees it (other tenants' unused reservations withheld), every node's capacity
   (`eru.planning.capacity`), the placement slots and, for mode `score`, the scorers' options completed from the
   nodes.
2. `place_locally(staged)`: the placement mode over the slots (`eru.planning.modes.place`, the function the
   distributor runs).
3. `conclude(staged, placements)`: the concrete plan of every placed instance (cores, NUMA node, memory), or the
   rejection with the numbers per node (`eru.planning.explain`) and every node not chosen with its reason
   (`eru.planning.left_out`: filtered, cordoned, down, at a forbid watermark, avoided, too small).

`record(staged)` is the decision's input as an `eru plan` problem (JSON text): `eru replay` and `eru plan` re-run it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter
from typing import Any

from eru.colocation import placement_memory
from eru.colocation.backoff import Avoidance, avoided_nodes
from eru.errors import InvalidInput, PlanningFailure
from eru.fairness.ledger import parent_of
from eru.planning import left_out, node_filter
from eru.planning.analysis_cache import AnalysisCache, NameIndex, Result
from eru.planning.capacity import NodeAnalysis, analyse_nodes, materialize_analysed, slots_from_analyses, usage_columns
from eru.planning.capacity_map import NodeCapacities
from eru.planning.distribute import SlotColumns
from eru.planning.explain import explain_failure
from eru.planning.left_out import LeftOut
from eru.planning.modes import NodeSlot, PlacementRequest, place_arrays
from eru.planning.plan import Outcome, Plan, Rejection
from eru.planning.reservations import Amount, withheld_for, withheld_json, withhold
from eru.planning.resources import NodeResources, node_positions, node_to_mapping
from eru.planning.scorers.from_resources import deploy_score_options
from eru.planning.snapshot import EMPTY, ClusterSnapshot, DeployAsk

_MODES_WITHOUT_USAGE = frozenset({"auto", "each", "fill"})
"""Built-in modes that never read usage or rate (docs/placement-modes.md): their columns are not computed."""

NodeCache = dict[str, tuple[NodeResources, str]]
_NAME, _CAPACITY = attrgetter("name"), attrgetter("capacity")  # one pass in C over the nodes / their analyses
"""node name → (the node object, its JSON text without the closing brace): `record` reuses a node's text between
the requests of one batch while the node object is the same (only the nodes a request charged change)."""


@dataclass(frozen=True, slots=True)
class Staged:
    """Step 1's result: everything the placement and the record need."""

    snapshot: ClusterSnapshot
    ask: DeployAsk
    considered: tuple[NodeResources, ...]
    """The nodes the request may use, before withholding (recorded as the problem's nodes)."""
    nodes: tuple[NodeResources, ...]
    """The same nodes as the request's tenant sees them."""
    counts: Mapping[str, int]
    """node → live instances of the workload (nodes with none left out)."""
    analyses: tuple[NodeAnalysis, ...]
    options: Mapping[str, Any]
    withheld: Mapping[str, Amount]
    avoided: Mapping[str, Avoidance]
    usages: tuple[tuple[float, float], ...] | None = None
    """Each node's (usage, rate) when the stage already has them (an `AnalysisCache`), in node order."""
    left_out: tuple[LeftOut, ...] = ()
    """The pod's nodes the request may not use, each with its reason (`eru.planning.left_out`): unschedulable,
    at a forbid watermark (batch), avoided after evictions (batch)."""
    columns_of: Result | None = None
    """The `AnalysisCache`'s result when the stage had one: the node names and capacities as columns, patched
    across the requests of a batch rather than rebuilt from every node (`columns`)."""

    @property
    def placement(self) -> PlacementRequest:
        """What the placement mode is asked."""
        return PlacementRequest(self.ask.count, self.ask.nodes_limit, self.options)

    def slots(self) -> list[NodeSlot]:
        """The nodes as the placement mode sees them (capacity, live count, usage, rate), in node order."""
        if self.usages is None:
            return slots_from_analyses(self.nodes, self.analyses, self.ask.request, self.counts)
        count = self.counts.get
        return [
            NodeSlot(node.name, analysis.capacity, count(node.name, 0), usage, rate)
            for node, analysis, (usage, rate) in zip(self.nodes, self.analyses, self.usages, strict=True)
        ]

    def columns(self) -> SlotColumns:
        """The placement input as columns (no object per node): exactly what `place_locally` gives the mode, so the
        allocator's prediction, the distributor and `eru plan` run the mode over the same arrays."""
        nodes, ask, cached, counts = self.nodes, self.ask, self.columns_of, self.counts
        if cached is not None and cached.analyses is not self.analyses:
            cached = None  # a Staged rebuilt with other analyses: its columns are not these
        if cached is None:
            names: tuple[str, ...] = tuple(map(_NAME, nodes))
            capacity: Sequence[int] = list(map(_CAPACITY, self.analyses))
        else:
            names, capacity = cached.names.names, cached.capacity
        count: list[int] | None = None
        if counts and cached is not None and 4 * len(counts) < len(names):  # a workload on few of the nodes
            count = cached.names.count_column(counts)
        if counts and count is None:
            count = list(map(counts.get, names, repeat(0)))
        usage: list[float] | None = None
        rate: list[float] | None = None
        if ask.mode not in _MODES_WITHOUT_USAGE:
            if self.usages is None:
                usage, rate = usage_columns(nodes, ask.request)
            else:
                usage, rate = [pair[0] for pair in self.usages], [pair[1] for pair in self.usages]
        return SlotColumns(names, capacity, count, usage, rate)

    def capacities(self) -> dict[str, int]:
        """node → instances of the request it can take."""
        return dict(zip(map(_NAME, self.nodes), map(_CAPACITY, self.analyses), strict=True))


def stage(snapshot: ClusterSnapshot, ask: DeployAsk, cache: AnalysisCache | None = None) -> Staged:
    """Step 1 (see the module doc). With `cache` (one per batch), nodes unchanged since an earlier request of the
    batch are not analysed again; the result is the same."""
    nodes: tuple[NodeResources, ...] = snapshot.nodes
    avoided: dict[str, Avoidance] = {}
    reasons, out = _filtered(snapshot, ask)
    if out:
        nodes = tuple(node for node in nodes if node.name not in out)
    unschedulable, forbid = snapshot.unschedulable.keys() - out, snapshot.forbid_batch - out
    reasons += [left_out.unschedulable(name, snapshot.unschedulable[name]) for name in sorted(unschedulable)]
    if ask.request.batch and forbid:
        marks = snapshot.watermarks
        reasons += [left_out.forbidden(name, marks.get(name, ())) for name in sorted(forbid)]
        nodes = tuple(node for node in nodes if node.name not in forbid)
    if ask.avoid_evictions and snapshot.evictions is not None:
        memory = snapshot.evictions
        history = [e for e in memory.history if e.workload == ask.workload]
        avoided = avoided_nodes(history, ask.workload, memory.now, memory.keep)
        avoided = {name: why for name, why in avoided.items() if name not in out}
        reasons += [left_out.avoided(name, why) for name, why in placement_memory.explain(avoided).items()]
        nodes = tuple(placement_memory.without_avoided(nodes, avoided))
    live = snapshot.workload_counts(ask.workload)
    visible = nodes
    withheld: dict[str, Amount] = {}
    if snapshot.reservations:
        names = {node.name for node in nodes}
        others = withheld_for(parent_of(ask.tenant), snapshot.reservations, snapshot.held)
        withheld = {name: amount for name, amount in others.items() if name in names}
        if withheld:
            visible = tuple(withhold(list(nodes), withheld))
    usages: tuple[tuple[float, float], ...] | None = None
    columns_of: Result | None = None
    if cache is None:
        analyses = tuple(analyse_nodes(visible, ask.request, snapshot.config))
    else:
        columns_of = cache.analysed(visible, ask.request, snapshot.config)
        analyses, usages = columns_of.analyses, columns_of.usages
    index = None if columns_of is None else columns_of.names  # `visible`'s names: `nodes`' (withholding keeps them)
    counts = _live_counts(nodes, live, index) if live else {}
    options: Mapping[str, Any] = ask.options
    if ask.mode == "score" and visible:
        # the scorers see the nodes' real resources and QoS mix; recorded in the decision, so it replays as is
        built = deploy_score_options(
            visible, ask.request, ask.options, pod_weights=snapshot.pod_weights, qos=snapshot.qos
        )
        options = json.loads(json.dumps(built, default=_plain_value))
    return Staged(
        snapshot, ask, nodes, visible, counts, analyses, options, withheld, avoided, usages, tuple(reasons), columns_of
    )


def _live_counts(
    nodes: tuple[NodeResources, ...], live: Mapping[str, int], index: NameIndex | None = None
) -> dict[str, int]:
    """node → live instances of the workload, for `nodes` with any, in node order. A workload on fewer than a
    quarter of the nodes: with `index` (the nodes' names and positions, from the analysis cache) its nodes looked up
    there and put in node order; else found by bisection when they are few (a workload on a few nodes of a large
    pod) and all found. Else one pass over `nodes`."""
    if index is not None and 4 * len(live) < len(nodes) and (where := index.positions()) is not None:
        found = [where[name] for name, count in live.items() if count and name in where]
        found.sort()
        return {name: live[name] for name in (index.names[at] for at in found)}
    positions = None
    if 16 * len(live) < len(nodes):
        positions = node_positions(nodes, [name for name, count in live.items() if count])
    if positions is None:
        return {node.name: live[node.name] for node in nodes if live.get(node.name)}
    return {name: live[name] for name in (nodes[at].name for at in positions)}


def _filtered(snapshot: ClusterSnapshot, ask: DeployAsk) -> tuple[list[LeftOut], frozenset[str]]:
    """The nodes the request's filter leaves out, with their reasons, and their names; `InvalidInput` naming the
    filter's part when it names a node the pod does not have or matches none (`eru.planning.node_filter`)."""
    spec = ask.node_filter
    if not spec:
        return [], frozenset()
    labels = snapshot.node_labels()
    node_filter.check(spec, labels, snapshot.pod)
    why = {name: spec.why_not(name, node_labels) for name, node_labels in labels.items()}
    reasons = [node_filter.filtered(name, text) for name, text in why.items() if text is not None]
    return reasons, frozenset(entry.node for entry in reasons)


def place_locally(staged: Staged) -> Mapping[str, int] | PlanningFailure:
    """Step 2 in process: the placement mode's counts, or its `PlanningFailure`."""
    if not staged.nodes:
        return {}  # `conclude` refuses a request with no node to go to, whatever the mode
    nodes, ask = staged.nodes, staged.ask
    names = list(map(_NAME, nodes))
    capacity = list(map(_CAPACITY, staged.analyses))
    existing = [staged.counts.get(name, 0) for name in names] if staged.counts else [0] * len(names)
    usage: list[float] | None = None
    rate: list[float] | None = None
    if ask.mode not in _MODES_WITHOUT_USAGE:
        usage, rate = usage_columns(nodes, ask.request)
    try:
        return place_arrays(ask.mode, names, capacity, existing, usage, rate, staged.placement)
    except PlanningFailure as failure:
        return failure


def conclude(staged: Staged, placed: Mapping[str, int] | PlanningFailure, *, trusted: bool = False) -> Outcome:
    """Step 3: the plan for `placed` (the mode's counts), or the rejection (the mode's failure, explained per node).

    Raises `InvalidInput` when `placed` names an unknown node or exceeds a node's capacity (a faulty placer); with
    `trusted` (the answer of `place_locally`, whose modes check their own answers) that check is skipped."""
    avoided = placement_memory.explain(staged.avoided)
    if not staged.nodes:
        pod = staged.snapshot.pod
        where = f"pod {pod!r} has" if pod else "the problem has"
        why = left_out.summary(staged.left_out) or "none registered"
        failure = PlanningFailure(
            f"{where} no node for this request: {why}",
            code="no_schedulable_node",
            pod=pod,
            **left_out.details(staged.left_out),
        )
        return Rejection(failure, avoided)
    if isinstance(placed, PlanningFailure):
        return Rejection(_explained(staged, placed), avoided)
    # placed on few of many nodes: those looked up by bisection, not a dict of every node (docs/planning.md
    # "Per-batch cost"); on many of them (a small pod), the dict is the cheaper
    many = 8 * len(placed) >= len(staged.nodes)
    capacity = staged.capacities() if many else NodeCapacities(staged.nodes, staged.analyses)
    if trusted:
        placements = dict(placed)
    else:
        _check_placed(placed, capacity)
        placements = {name: count for name, count in placed.items() if count}
    containers = materialize_analysed(staged.nodes, staged.analyses, staged.ask.request, placements)
    return Plan(placements, capacity, tuple(containers), avoided)


def _explained(staged: Staged, placed: PlanningFailure) -> PlanningFailure:
    """The mode's failure with the numbers per node (`explain_failure`: its message counts the nodes per limiting
    resource) and, when nodes were left out before placement, every node not chosen with its reason: those left out,
    then those too small for one instance."""
    config, request = staged.snapshot.config, staged.ask.request
    explained = explain_failure(placed, staged.nodes, staged.analyses, request, config)
    if not staged.left_out:
        return explained
    resources = explained.details["resources"]
    cores, memory = request.cpu_request / config.share_base, request.memory_request
    small = [
        left_out.too_small(node.name, resources[node.name], cores, memory)
        if node.name in resources
        else LeftOut(node.name, "too_small", "too small", node.name)
        for node, analysis in zip(staged.nodes, staged.analyses, strict=True)
        if analysis.capacity == 0
    ]
    reasons = (*staged.left_out, *small)
    failure = PlanningFailure(
        f"{explained.message}; not chosen: {left_out.summary(reasons)}", code=explained.code, **explained.details
    )
    failure.details.update(left_out.details(reasons))
    return failure


def _check_placed(placed: Mapping[str, int], capacity: Mapping[str, int]) -> None:
    for name, count in placed.items():
        if name not in capacity:
            raise InvalidInput(f"placements.{name}", "the mode placed instances on an unknown node")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidInput(f"placements.{name}", f"expected a non-negative integer, got {count!r}")
        if count > capacity[name]:
            raise InvalidInput(f"placements.{name}", f"the mode placed {count} instances, capacity {capacity[name]}")


def decide(snapshot: ClusterSnapshot, ask: DeployAsk) -> Outcome:
    """The whole decision in process: `conclude(stage(...), place_locally(...))`."""
    staged = stage(snapshot, ask)
    return conclude(staged, place_locally(staged), trusted=True)


def record(staged: Staged, cache: NodeCache | None = None) -> str:
    """The decision's input as an `eru plan` problem (JSON text, docs/planning.md), so `eru plan` and `eru replay`
    re-run exactly this decision: the nodes the request may use (before withholding) with their live counts, the
    withheld amounts, the completed options and, for batch requests, the eviction memory."""
    cache = cache if cache is not None else {}
    parts = [
        f'{node_text(node, staged, cache)}, "count": {staged.counts.get(node.name, 0)}}}' for node in staged.considered
    ]
    return json.dumps(problem_head(staged))[:-1] + ', "nodes": [' + ", ".join(parts) + "]}"


def node_text(node: NodeResources, staged: Staged, cache: NodeCache) -> str:
    """The node in `eru plan` form, as JSON text without its closing brace (the record adds the count), reused from
    `cache` while the node object is the same."""
    cached = cache.get(node.name)
    if cached is None or cached[0] is not node:
        text = json.dumps({**node_to_mapping(node), **batch_fields(node, staged.snapshot.config.share_base)})
        cached = cache[node.name] = (node, text[:-1])
    return cached[1]


def problem_head(staged: Staged) -> dict[str, Any]:
    """Everything of the recorded problem but its nodes."""
    snapshot, ask = staged.snapshot, staged.ask
    config = snapshot.config
    head: dict[str, Any] = {
        "kind": "deploy",
        "config": {
            "share_base": config.share_base,
            "max_fragment_cores": config.max_fragment_cores,
            "max_deploy_count": config.max_deploy_count,
        },
        "mode": ask.mode,
        "count": ask.count,
        "nodes_limit": ask.nodes_limit,
        "request": dict(ask.resources),
    }
    if ask.request.batch:
        head["priority_class"] = "batch"  # bounded by the nodes' `batch` allowances (docs/colocation.md)
        if snapshot.forbid_batch:  # left out for batch: named in the decision (eru.planning.left_out)
            head["forbid_batch"] = left_out.forbid_json(snapshot.forbid_batch, snapshot.watermarks)
    if ask.node_filter:  # the filter and every node's labels: the same nodes are left out on replay
        head["node_filter"] = ask.node_filter.to_dict()
        head["node_labels"] = {name: dict(labels) for name, labels in snapshot.node_labels().items()}
    if snapshot.unschedulable:
        head["unschedulable"] = left_out.states_json(snapshot.unschedulable)
    if snapshot.pod:
        head["pod"] = snapshot.pod
    if staged.options:
        head["options"] = dict(staged.options)
    if staged.withheld:
        head["withheld"] = withheld_json(staged.withheld, config.share_base)
    if ask.avoid_evictions and snapshot.evictions is not None:
        memory = snapshot.evictions
        history = [e for e in memory.history if e.workload == ask.workload]
        head.update(placement_memory.problem_fields(ask.workload, memory.now, history, memory.keep))
    return head


def batch_fields(node: NodeResources, share_base: int) -> dict[str, Any]:
    """The node's batch allowance in `eru plan` form (`{"batch": {"cpu": cores, "memory": bytes}}`), if it has one."""
    allowance: dict[str, Any] = {}
    if node.batch_cpu is not None:
        allowance["cpu"] = node.batch_cpu / share_base
    if node.batch_memory is not None:
        allowance["memory"] = node.batch_memory
    return {"batch": allowance} if allowance else {}


def _plain_value(value: Any) -> Any:
    """JSON for the planning core's option objects (`NodeLoad` dataclasses, read-only mappings)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


__all__ = [
    "EMPTY",
    "NodeCache",
    "Staged",
    "batch_fields",
    "conclude",
    "decide",
    "node_text",
    "place_locally",
    "problem_head",
    "record",
    "stage",
]
