"""`eru plan` (docs/planning.md): a JSON problem in, a JSON answer out, through the same functions the services call.

`solve(problem)` dispatches on `problem["kind"]` (default `deploy`) through `KINDS`. A kind is either a function or a
lazy "module:function" string, imported only when asked for, so the colocation (`evict`) and fairness (`drf`) kinds
live in their own packages. Malformed input raises `InvalidInput` (exit 2), a valid problem that cannot be satisfied
raises `PlanningFailure` (exit 1).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from eru.colocation import placement_memory
from eru.errors import InvalidInput, PlanningFailure
from eru.planning import left_out, node_filter
from eru.planning.batch import BATCH, PRIORITY_CLASSES, check_batch_growth
from eru.planning.capacity import analyse_nodes, materialize_analysed, slots_from_analyses
from eru.planning.decide import decide
from eru.planning.explain import explain_failure
from eru.planning.modes import NodeSlot, PlacementRequest, place
from eru.planning.plan import Rejection
from eru.planning.realloc import delta_from_mapping, origin_from_mapping, plan_realloc_group
from eru.planning.request import NormalizedRequest, PlanningConfig, config_from_mapping, normalize_request
from eru.planning.reservations import Amount, parse_withheld, withhold
from eru.planning.resources import ContainerPlan, NodeResources, node_from_mapping
from eru.planning.snapshot import ClusterSnapshot, DeployAsk, EvictionHistory

Kind = Callable[[Mapping[str, Any]], dict[str, Any]]
MAX_COUNT = 10**15
MAX_LISTED_PLANS = 10_000
"""`capacity` with `"plans": true` lists at most this many plans per node (and says when it stopped)."""


def solve(problem: object) -> dict[str, Any]:
    """Solve one `eru plan` problem."""
    if not isinstance(problem, Mapping):
        raise InvalidInput("problem", f"expected a JSON object, got {type(problem).__name__}")
    kind = problem.get("kind", "deploy")
    if not isinstance(kind, str):
        raise InvalidInput("kind", f"expected a string, got {kind!r}")
    return resolve_kind(kind)(problem)


def resolve_kind(kind: str) -> Kind:
    """The function behind a kind name; an unknown or unavailable kind is `InvalidInput` on `kind`."""
    entry = KINDS.get(kind)
    if entry is None:
        raise InvalidInput("kind", f"unknown kind {kind!r} (known: {', '.join(sorted(KINDS))})")
    if callable(entry):
        return entry
    module_name, _, function_name = entry.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is not None and module_name.startswith(error.name):
            raise InvalidInput(
                "kind", f"kind {kind} is not available (module {module_name} is not installed)"
            ) from None
        raise
    function = getattr(module, function_name, None)
    if not callable(function):
        raise InvalidInput("kind", f"kind {kind} is not available ({entry} is missing)")
    result: Kind = function
    return result


def _check_fields(problem: Mapping[str, Any], known: set[str], field: str = "") -> None:
    for key in problem:
        if key not in known:
            name = key if isinstance(key, str) and key.strip() else repr(key)
            raise InvalidInput(f"{field}{name}", f"unknown field (known: {', '.join(sorted(known))})")


def _integer(problem: Mapping[str, Any], key: str, default: int, maximum: int = MAX_COUNT) -> int:
    value = problem.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(key, f"expected an integer, got {value!r}")
    if not 0 <= value <= maximum:
        raise InvalidInput(key, f"must be within 0..{maximum}, got {value}", minimum=0, maximum=maximum)
    return value


def _fraction(raw: Mapping[str, Any], key: str, field: str) -> float:
    value = raw.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1e6:
        raise InvalidInput(f"{field}.{key}", f"expected a number within 0..1e6, got {value!r}")
    return float(value)


def _nodes(problem: Mapping[str, Any]) -> list[Any]:
    nodes = problem.get("nodes")
    if not isinstance(nodes, list):
        raise InvalidInput("nodes", f"expected a list of nodes, got {type(nodes).__name__}")
    names: set[str] = set()
    for index, node in enumerate(nodes):
        name = node.get("name") if isinstance(node, Mapping) else None
        if not isinstance(name, str):
            continue  # each kind's node parser names a missing or non-string name itself
        if name in names:
            raise InvalidInput(f"nodes[{index}].name", f"duplicate node name {name!r}")
        names.add(name)
    return nodes


def _capacity_slot(raw: Mapping[str, Any], field: str) -> NodeSlot:
    _check_fields(raw, {"name", "capacity", "count", "usage", "rate"}, f"{field}.")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"{field}.name", f"expected a non-empty string, got {name!r}")
    capacity = _integer(raw, "capacity", 0)
    count = _integer(raw, "count", 0)
    return NodeSlot(name, capacity, count, _fraction(raw, "usage", field), _fraction(raw, "rate", field))


def _node_count(raw: Mapping[str, Any], field: str) -> int:
    value = raw.get("count", 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise InvalidInput(f"{field}.count", f"expected an integer within 0..{MAX_COUNT}, got {value!r}")
    return value


def solve_deploy(problem: Mapping[str, Any]) -> dict[str, Any]:
    """Kind `deploy`: capacities, the mode's placement and (for resource nodes) the concrete plans.

    A problem of resource nodes goes through `eru.planning.decide`, the function the allocator calls; a problem with
    capacity-only nodes (`{"name", "capacity", "count", ...}`) is placed over those slots directly."""
    _check_fields(problem, DEPLOY_FIELDS)
    raw_nodes = _nodes(problem)
    if any(isinstance(raw, Mapping) and "capacity" in raw for raw in raw_nodes):
        if "node_filter" in problem:
            raise InvalidInput("node_filter", "a problem of capacity-only nodes takes no filter: list only the nodes")
        return _solve_slots(problem)
    snapshot, ask = deploy_problem(problem)
    outcome = decide(snapshot, ask)
    if isinstance(outcome, Rejection):
        raise outcome.failure
    return outcome.answer()


DEPLOY_FIELDS = {
    "kind",
    "config",
    "mode",
    "count",
    "nodes_limit",
    "request",
    "nodes",
    "options",
    "priority_class",
    "withheld",
    "pod",
    "unschedulable",
    "forbid_batch",
    "node_filter",
    "node_labels",
} | placement_memory.FIELDS
WITHHELD_OWNER = "(other tenants)"
"""The owner of a problem's `withheld` amounts in its snapshot: reservations of nobody the request belongs to."""


def _deploy_header(problem: Mapping[str, Any]) -> tuple[PlanningConfig, str, int, int, Mapping[str, Any]]:
    """A deploy problem's config, mode, count, nodes_limit and options, each checked (`InvalidInput` naming it)."""
    config = config_from_mapping(problem.get("config"))
    mode = problem.get("mode", "auto")
    if not isinstance(mode, str):
        raise InvalidInput("mode", f"expected a string, got {mode!r}")
    count = _integer(problem, "count", 0)
    nodes_limit = _integer(problem, "nodes_limit", 0)
    options = problem.get("options", {})
    if not isinstance(options, Mapping):
        raise InvalidInput("options", f"expected an object, got {type(options).__name__}")
    return config, mode, count, nodes_limit, options


def deploy_problem(problem: Mapping[str, Any]) -> tuple[ClusterSnapshot, DeployAsk]:
    """A deploy problem (docs/planning.md) as the decision's snapshot and ask; `InvalidInput` naming the field."""
    config, mode, count, nodes_limit, options = _deploy_header(problem)
    memory = placement_memory.history_of(problem)  # eviction memory: docs/colocation.md
    workload = memory[0] if memory is not None else ""
    nodes: list[NodeResources] = []
    counts: dict[str, int] = {}
    for index, raw in enumerate(_nodes(problem)):
        field = f"nodes[{index}]"
        node = node_from_mapping(raw, field, config.share_base)
        nodes.append(node)
        if count_here := _node_count(raw, field):
            counts[node.name] = count_here
    raw_request = problem.get("request", {})
    request = with_priority_class(normalize_request(raw_request, config), problem)
    reservations: dict[str, dict[str, Amount]] = {}
    if "withheld" in problem:
        # other tenants' unused reservations (docs/fairness-and-scoring.md): this request may not use them
        withheld = parse_withheld(problem["withheld"], config.share_base)
        reservations = {name: {WITHHELD_OWNER: amount} for name, amount in withheld.items()}
    evictions = EvictionHistory(memory[1], tuple(memory[2]), memory[3]) if memory is not None else None
    snapshot = ClusterSnapshot(
        config=config,
        nodes=tuple(nodes),
        counts={workload: counts},
        reservations=reservations,
        evictions=evictions,
        **_left_out_fields(problem),
    )
    resources = raw_request if isinstance(raw_request, Mapping) else {}
    ask = DeployAsk(
        request,
        mode,
        count,
        nodes_limit,
        options,
        workload=workload,
        resources=resources,
        avoid_evictions=evictions is not None,
        node_filter=node_filter.parse(problem["node_filter"]) if "node_filter" in problem else None,
    )
    return snapshot, ask


def _left_out_fields(problem: Mapping[str, Any]) -> dict[str, Any]:
    """The snapshot fields of a problem's nodes left out (docs/planning.md "Nodes left out"): `pod`,
    `unschedulable`, `forbid_batch` and `node_labels`."""
    fields: dict[str, Any] = {}
    pod = problem.get("pod", "")
    if not isinstance(pod, str):
        raise InvalidInput("pod", f"expected a pod name, got {pod!r}")
    fields["pod"] = pod
    if "unschedulable" in problem:
        fields["unschedulable"] = left_out.parse_states(problem["unschedulable"])
    if "forbid_batch" in problem:
        fields["forbid_batch"], fields["watermarks"] = left_out.parse_forbid(problem["forbid_batch"])
    if "node_labels" in problem:  # every node's labels, for the node filter (docs/planning.md "Node filters")
        fields["labels"] = node_filter.parse_labels(problem["node_labels"])
    return fields


def _solve_slots(problem: Mapping[str, Any]) -> dict[str, Any]:
    """A deploy problem with capacity-only nodes: the mode over the slots as given (resource nodes among them are
    analysed first)."""
    config, mode, count, nodes_limit, options = _deploy_header(problem)
    avoided = placement_memory.memory_of(problem)
    raw_nodes = placement_memory.without_avoided(_nodes(problem), avoided)
    resource_nodes: list[NodeResources] = []
    counts: dict[str, int] = {}
    given_slots: dict[int, NodeSlot] = {}
    for index, raw in enumerate(raw_nodes):
        field = f"nodes[{index}]"
        if isinstance(raw, Mapping) and "capacity" in raw:
            given_slots[index] = _capacity_slot(raw, field)
        else:
            node = node_from_mapping(raw, field, config.share_base)
            resource_nodes.append(node)
            counts[node.name] = _node_count(raw, field)
    if "withheld" in problem:
        resource_nodes = withhold(resource_nodes, parse_withheld(problem["withheld"], config.share_base))
    analyses = []
    resource_slots: list[NodeSlot] = []
    request = None
    if resource_nodes or "request" in problem:
        request = with_priority_class(normalize_request(problem.get("request", {}), config), problem)
    if resource_nodes and request is not None:
        analyses = analyse_nodes(resource_nodes, request, config)
        resource_slots = slots_from_analyses(resource_nodes, analyses, request, counts)
    next_resource = iter(resource_slots)
    slots = [given_slots[index] if index in given_slots else next(next_resource) for index in range(len(raw_nodes))]
    try:
        placements = place(mode, slots, PlacementRequest(count, nodes_limit, options))
    except PlanningFailure as failure:
        if request is None or not resource_nodes:
            raise
        raise explain_failure(failure, resource_nodes, analyses, request, config) from None
    check_placements_of(slots, placements)
    containers = []
    if request is not None and resource_nodes:
        resource_names = {node.name for node in resource_nodes}
        on_resources = {name: placed for name, placed in placements.items() if name in resource_names}
        containers = materialize_analysed(resource_nodes, analyses, request, on_resources)
    answer = deploy_answer({slot.name: slot.capacity for slot in slots}, placements, containers)
    if avoided:
        answer["avoided"] = placement_memory.explain(avoided)
    return answer


def deploy_answer(
    capacities: Mapping[str, int], placements: Mapping[str, int], containers: Sequence[ContainerPlan]
) -> dict[str, Any]:
    """The answer of kind `deploy` (docs/planning.md); the allocator records its decisions in this same form, so that
    `eru replay` compares like with like. `total` is the number of instances placed."""
    return {
        "deploy": dict(placements),
        "capacity": dict(capacities),
        "total": sum(placements.values()),
        "containers": [plan.to_dict() for plan in containers],
    }


def check_placements_of(slots: Sequence[NodeSlot], placements: Mapping[str, int]) -> None:
    """A mode's answer names only known nodes, with counts within their capacity."""
    capacity = {slot.name: slot.capacity for slot in slots}
    for name, count in placements.items():
        if name not in capacity:
            raise InvalidInput(f"placements.{name}", "the mode placed instances on an unknown node")
        if count > capacity[name]:
            raise InvalidInput(f"placements.{name}", f"the mode placed {count} instances, capacity {capacity[name]}")


def _resource_nodes(problem: Mapping[str, Any], share_base: int) -> list[NodeResources]:
    return [node_from_mapping(raw, f"nodes[{index}]", share_base) for index, raw in enumerate(_nodes(problem))]


def with_priority_class(request: NormalizedRequest, problem: Mapping[str, Any]) -> NormalizedRequest:
    """The request marked batch when the problem's `priority_class` is `batch` (default `prod`): a batch request is
    bounded by each node's `batch` allowance (docs/colocation.md)."""
    return replace(request, batch=is_batch_problem(problem))


def is_batch_problem(problem: Mapping[str, Any]) -> bool:
    """Whether the problem's `priority_class` (default `prod`; `InvalidInput` if unknown) is `batch`."""
    priority_class = problem.get("priority_class", "prod")
    if priority_class not in PRIORITY_CLASSES:
        raise InvalidInput("priority_class", f"expected one of {', '.join(PRIORITY_CLASSES)}, got {priority_class!r}")
    return bool(priority_class == BATCH)


def solve_capacity(problem: Mapping[str, Any]) -> dict[str, Any]:
    """Kind `capacity`: every node's capacity, and its plans in allocation order with `"plans": true`."""
    _check_fields(problem, {"kind", "config", "request", "nodes", "plans", "priority_class"})
    config = config_from_mapping(problem.get("config"))
    request = with_priority_class(normalize_request(problem.get("request", {}), config), problem)
    with_plans = problem.get("plans", False)
    if not isinstance(with_plans, bool):
        raise InvalidInput("plans", f"expected true or false, got {with_plans!r}")
    nodes = _resource_nodes(problem, config.share_base)
    analyses = analyse_nodes(nodes, request, config)
    answer: dict[str, Any] = {}
    for node, analysis in zip(nodes, analyses, strict=True):
        entry: dict[str, Any] = {"capacity": analysis.capacity}
        if with_plans:
            listed = min(analysis.capacity, MAX_LISTED_PLANS)
            entry["plans"] = [{"cpu_map": dict(cpu_map), "numa_node": numa} for cpu_map, numa in analysis.plans(listed)]
            if listed < analysis.capacity:
                entry["plans_truncated"] = True
        answer[node.name] = entry
    return {"nodes": answer, "total": sum(analysis.capacity for analysis in analyses)}


def solve_realloc(problem: Mapping[str, Any]) -> dict[str, Any]:
    """Kind `realloc`: one container's new allocation after applying the deltas in `request`; with `origins` (a
    list) instead of `origin`, a group on one node that fits whole or fails whole → `{"containers": [...]}`."""
    _check_fields(problem, {"kind", "config", "node", "origin", "origins", "request", "priority_class"})
    config = config_from_mapping(problem.get("config"))
    node_raw = problem.get("node")
    if not isinstance(node_raw, Mapping):
        raise InvalidInput("node", "expected a resource node object")
    node = node_from_mapping(node_raw, "node", config.share_base)
    group = problem.get("origins")
    if group is not None and "origin" in problem:
        raise InvalidInput("origins", "give either origin (one container) or origins (a group), not both")
    if group is not None and (not isinstance(group, list) or not group):
        raise InvalidInput("origins", "expected a non-empty list of running containers")
    origins = (
        [origin_from_mapping(raw, config, f"origins[{i}]") for i, raw in enumerate(group)]
        if group is not None
        else [origin_from_mapping(problem.get("origin", {}), config)]
    )
    delta = delta_from_mapping(problem.get("request", {}), config)
    batch = is_batch_problem(problem)
    result = plan_realloc_group(node, origins, delta, config)
    if batch:
        check_batch_growth(node, [origin.request for origin in origins], result.requests, config.share_base)
    answers = [
        realloc_answer(request, plan, config.share_base)
        for request, plan in zip(result.requests, result.plans, strict=True)
    ]
    return {"containers": answers} if group is not None else answers[0]


def realloc_answer(request: NormalizedRequest, plan: ContainerPlan, share_base: int) -> dict[str, Any]:
    """One container's new allocation in the `realloc` answer form (shared with the allocator's decision record)."""
    return {
        "cpu_map": dict(plan.cpu_map),
        "numa_node": plan.numa_node,
        "memory_request": request.memory_request,
        "memory_limit": request.memory_limit,
        "cpu_request": request.cpu_request / share_base,
        "cpu_limit": request.cpu_limit / share_base,
        "cpu_bind": request.cpu_bind,
        "memory_soft": request.memory_soft,
    }


KINDS: dict[str, Kind | str] = {
    "deploy": solve_deploy,
    "capacity": solve_capacity,
    "realloc": solve_realloc,
    "evict": "eru.colocation.plan_kind:solve_evict",
    "drf": "eru.fairness.plan_kind:solve_drf",
    "admission": "eru.fairness.admission_json:solve_admission",
}
