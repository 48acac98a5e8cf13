"""Node filters against brute force (docs/placement-modes.md "Node filters"): on small pods with random labels, live
instances, cordoned nodes and filters, in every mode, a filtered decision places only on matching nodes and is the
decision of the pod cut down to its matching nodes by hand; its record replays the same. A filter naming an unknown
node or matching nothing is refused naming its part."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eru.errors import InvalidInput
from eru.plan_api import deploy_problem
from eru.planning import NodeResources, PlanningConfig, normalize_request
from eru.planning.decide import decide, record, stage
from eru.planning.left_out import NodeState
from eru.planning.node_filter import NodeFilter, node_filter
from eru.planning.plan import Plan, Rejection
from eru.planning.snapshot import ClusterSnapshot, DeployAsk

CONFIG = PlanningConfig()
GIB = 1024**3
MODES = ("auto", "each", "fill", "global", "drained", "score")
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LABELS = {"disk": ("ssd", "hdd"), "zone": ("a", "b")}


@st.composite
def pods(draw: st.DrawFn) -> tuple[ClusterSnapshot, dict[str, dict[str, str]]]:
    """Up to 6 nodes: schedulable ones with random room and live instances of workload `w`, cordoned ones, and
    every node's labels."""
    names = [f"n{index}" for index in range(draw(st.integers(1, 6)))]
    labels = {
        name: {key: draw(st.sampled_from(values)) for key, values in LABELS.items() if draw(st.booleans())}
        for name in names
    }
    cordoned = {name for name in names if draw(st.integers(0, 4)) == 0}
    nodes, live = [], {}
    for name in names:
        if name in cordoned:
            continue
        cores = draw(st.integers(1, 4))
        used = draw(st.integers(0, cores))
        nodes.append(
            NodeResources(
                name=name,
                cpu_map={str(i): 100 for i in range(cores)},
                memory=8 * GIB,
                used_cpu_map={str(i): 100 for i in range(used)},
            )
        )
        if count := draw(st.integers(0, 2)):
            live[name] = count
    snapshot = ClusterSnapshot(
        config=CONFIG,
        nodes=tuple(nodes),
        counts={"w": live},
        unschedulable={name: NodeState(cordoned=True) for name in sorted(cordoned)},
        labels=labels,
        pod="p",
    )
    return snapshot, labels


@st.composite
def filters(draw: st.DrawFn, names: list[str]) -> NodeFilter:
    pool = [*names, "ghost"] if draw(st.integers(0, 9)) == 0 else names
    nodes = draw(st.lists(st.sampled_from(pool), unique=True)) if draw(st.booleans()) else []
    exclude = draw(st.lists(st.sampled_from(pool), unique=True, max_size=2)) if draw(st.booleans()) else []
    labels = {key: draw(st.sampled_from(values)) for key, values in LABELS.items() if draw(st.integers(0, 2)) == 0}
    return node_filter(nodes, exclude, labels)


def _ask(mode: str, count: int, spec: NodeFilter | None) -> DeployAsk:
    """One bound core and 1 GiB per instance of workload `w`."""
    resources = {"cpu_bind": True, "cpu_request": 1, "memory_request": GIB}
    request = normalize_request(resources, CONFIG)
    return DeployAsk(request, mode, count, workload="w", tenant="t", resources=resources, node_filter=spec)


def _cut(snapshot: ClusterSnapshot, keep: set[str]) -> ClusterSnapshot:
    """The pod reduced to `keep` by hand: what a filtered decision must equal."""
    return ClusterSnapshot(
        config=snapshot.config,
        nodes=tuple(node for node in snapshot.nodes if node.name in keep),
        counts={"w": {name: n for name, n in snapshot.counts["w"].items() if name in keep}},
        unschedulable={name: state for name, state in snapshot.unschedulable.items() if name in keep},
        pod=snapshot.pod,
    )


@SETTINGS
@given(st.data(), pods(), st.sampled_from(MODES), st.integers(1, 6))
def test_a_filtered_decision_is_the_decision_on_the_matching_nodes(
    data: st.DataObject, pod: tuple[ClusterSnapshot, dict[str, dict[str, str]]], mode: str, count: int
) -> None:
    snapshot, labels = pod
    spec = data.draw(filters(sorted(labels)))
    ask = _ask(mode, count, spec or None)
    matching = {name for name, node_labels in labels.items() if spec.matches(name, node_labels)}
    unknown = (spec.nodes | spec.exclude_nodes) - labels.keys()
    if spec and (unknown or not matching):
        with pytest.raises(InvalidInput) as refused:
            decide(snapshot, ask)
        assert refused.value.field.startswith("node_filter")
        return
    outcome = decide(snapshot, ask)
    brute = decide(_cut(snapshot, matching), _ask(mode, count, None))
    assert type(outcome) is type(brute)
    if isinstance(outcome, Plan):
        assert isinstance(brute, Plan)
        assert set(outcome.placements) <= matching
        assert outcome.placements == brute.placements
        assert outcome.containers == brute.containers
    else:
        assert isinstance(outcome, Rejection)
        assert isinstance(brute, Rejection)
        assert outcome.failure.code == brute.failure.code
        if "left_out_counts" in outcome.failure.details:  # every node the filter left out is named so
            assert outcome.failure.details["left_out_counts"].get("filtered", 0) == len(labels) - len(matching)
    problem = json.loads(record(stage(snapshot, ask)))  # the record holds the filter and every node's labels
    replayed = decide(*deploy_problem(problem))
    assert replayed.answer() == outcome.answer()


def test_each_and_global_count_only_matching_nodes() -> None:
    nodes = tuple(
        NodeResources(name=name, cpu_map={str(i): 100 for i in range(4)}, memory=8 * GIB) for name in ("n1", "n2", "n3")
    )
    labels = {"n1": {"disk": "ssd"}, "n2": {"disk": "ssd"}, "n3": {"disk": "hdd"}}
    snapshot = ClusterSnapshot(config=CONFIG, nodes=nodes, counts={"w": {"n3": 3, "n1": 1}}, labels=labels, pod="p")
    ssd = node_filter(labels={"disk": "ssd"})
    each = decide(snapshot, _ask("each", 2, ssd))
    assert isinstance(each, Plan)
    assert each.placements == {"n1": 2, "n2": 2}
    ask = _ask("global", 3, ssd)
    limited = DeployAsk(ask.request, "global", 3, 2, workload="w", resources=ask.resources, node_filter=ssd)
    total = decide(snapshot, limited)  # at most 2 (old + new) per node: n1 holds 1 already
    assert isinstance(total, Plan)
    assert total.placements == {"n1": 1, "n2": 2}
