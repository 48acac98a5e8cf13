"""A batch decided with one `AnalysisCache` gives exactly the decisions, slots and records it gives without one
(docs/pipeline.md "Performance"): the cache only skips re-analysing nodes the previous requests left unchanged."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from eru.planning import NodeResources, PlanningConfig, normalize_request
from eru.planning.analysis_cache import AnalysisCache, NameIndex
from eru.planning.capacity import NodeAnalysis, analyse_nodes, node_usage
from eru.planning.decide import conclude, place_locally, record, stage
from eru.planning.plan import Plan
from eru.planning.snapshot import ClusterSnapshot, DeployAsk

CONFIG = PlanningConfig()
BOUND = {"cpu_bind": True, "cpu_request": 0.5, "memory_request": 64 << 20}
SHARED = {"cpu_request": 0.3, "memory_request": 256 << 20}


def _snapshot(shuffled: bool = False) -> ClusterSnapshot:
    nodes = [NodeResources(f"n{i}", _cores(4 + i % 3, shuffled and i % 2 == 1), (2 + i % 2) << 30) for i in range(6)]
    return ClusterSnapshot(config=CONFIG, nodes=tuple(nodes), qos={})


def _cores(count: int, shuffled: bool) -> dict[str, int]:
    """`count` cores of 100 pieces, their ids listed in id order or not (the cache keeps that check per id list)."""
    ids = [str(c) for c in range(count)]
    if shuffled:
        ids = ids[::2][::-1] + ids[1::2]
    return {core: 100 for core in ids}


def _asks() -> list[DeployAsk]:
    asks = []
    for index in range(40):
        resources = BOUND if index % 3 else SHARED
        mode = ("auto", "fill", "each", "global", "score")[index % 5] if index % 7 else "auto"
        count = 1 if mode == "each" else 1 + index % 4
        asks.append(
            DeployAsk(
                normalize_request(resources, CONFIG),
                mode,
                count,
                workload=f"w{index % 3}",
                tenant="t",
                resources=dict(resources),
            )
        )
    return asks


def _run(cache: AnalysisCache | None, shuffled: bool = False) -> list[tuple[Any, ...]]:
    snapshot, seen = _snapshot(shuffled), []
    for ask in _asks():
        staged = stage(snapshot, ask, cache)
        outcome = conclude(staged, place_locally(staged), trusted=True)
        seen.append((staged.slots(), staged.capacities(), record(staged), outcome.answer()))
        if isinstance(outcome, Plan):
            snapshot = snapshot.charged(ask, outcome.containers, outcome.placements)
    return seen


@pytest.mark.parametrize("shuffled", [False, True], ids=["ids in order", "ids out of order on some nodes"])
def test_a_batch_decided_with_the_cache_is_the_batch_decided_without_it(shuffled: bool) -> None:
    without, with_cache = _run(None, shuffled), _run(AnalysisCache(), shuffled)
    assert with_cache == without
    assert any("error" in answer for *_, answer in without)  # the batch runs the nodes full: rejections too
    assert sum("error" not in answer for *_, answer in without) > 10


def test_a_node_is_analysed_again_only_when_its_object_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    import eru.planning.analysis_cache as module

    analysed: list[str] = []
    real = module.analyse_nodes

    def counting(nodes: Any, request: Any, config: Any, orders: Any = None) -> Any:
        analysed.extend(node.name for node in nodes)
        return real(nodes, request, config, orders)

    monkeypatch.setattr(module, "analyse_nodes", counting)
    cache, snapshot = AnalysisCache(), _snapshot()
    ask = _asks()[1]
    staged = stage(snapshot, ask, cache)
    assert analysed == [node.name for node in snapshot.nodes]
    outcome = conclude(staged, place_locally(staged), trusted=True)
    assert isinstance(outcome, Plan)
    charged = snapshot.charged(ask, outcome.containers, outcome.placements)
    analysed.clear()
    stage(charged, ask, cache)
    assert analysed == sorted(outcome.placements)  # only the nodes the plan charged


def test_a_call_of_the_same_length_gives_each_positions_own_analysis() -> None:
    """The last call's results are copied and only the positions whose node object differs are looked up: a node
    moved to another position, a node changed in place, a node replaced by another of the same length's list — each
    gets its own analysis, never its position's previous one."""
    request = normalize_request(BOUND, CONFIG)
    nodes = list(_snapshot().nodes)
    changed = NodeResources("n2", _cores(2, False), 1 << 30, used_cpu_map={"0": 100})
    other = NodeResources("x9", _cores(8, False), 8 << 30)
    calls = [
        nodes,
        nodes,  # the same objects: the last results as they are
        [nodes[0], nodes[1], changed, *nodes[3:]],  # one node changed in place
        [*nodes[::-1]],  # the same nodes in another order
        [other, *nodes[1:]],  # another node at a position
        nodes[:4],  # another length: looked up by name
        nodes,
    ]
    cache = AnalysisCache()
    for call in calls:
        analyses, usages = cache.analyse(call, request, CONFIG)
        assert [_seen(analysis) for analysis in analyses] == [
            _seen(analysis) for analysis in analyse_nodes(call, request, CONFIG)
        ]
        assert usages == tuple(node_usage(node, request) for node in call)


def _seen(analysis: NodeAnalysis) -> tuple[int, list[tuple[Any, str | None]]]:
    """What a node's analysis answers: its capacity and every plan it holds."""
    return analysis.capacity, analysis.plans(analysis.capacity)


def _plain(staged: Any) -> tuple[Any, ...]:
    columns = staged.columns()
    lists = (columns.count, columns.usage, columns.rate)
    return (list(columns.names), list(columns.capacity), *(None if c is None else list(c) for c in lists))


@pytest.mark.parametrize("seed", range(6))
def test_the_patched_columns_are_the_columns_built_from_every_node(seed: int) -> None:
    """`Staged.columns` with a cache (names and capacities patched at the positions a request charged, live counts
    set at their nodes' positions) against the columns built from every node without one, over a seeded random
    batch on a pod of 60 nodes: workloads on few nodes and on many, nodes replaced, renamed, dropped and added
    between requests (a pod's nodes keep unique names, sorted)."""
    rng = random.Random(seed)
    nodes = [NodeResources(f"n{i:02d}", _cores(2 + i % 5, False), (1 + i % 4) << 30) for i in range(60)]
    snapshot = ClusterSnapshot(config=CONFIG, nodes=tuple(nodes), qos={})
    cache, asks, compared = AnalysisCache(), _asks(), 0
    for step in range(60):
        ask = asks[rng.randrange(len(asks))]
        staged, reference = stage(snapshot, ask, cache), stage(snapshot, ask)
        assert _plain(staged) == _plain(reference)
        assert list(staged.counts.items()) == list(reference.counts.items())  # in node order: the record's order
        compared += bool(staged.counts)
        outcome = conclude(staged, place_locally(staged), trusted=True)
        if isinstance(outcome, Plan):
            snapshot = snapshot.charged(ask, outcome.containers, outcome.placements)
        if step % 9 == 8:  # the pod changes: a node renamed in place, or one dropped, or one added
            pod = list(snapshot.nodes)
            at = rng.randrange(len(pod))
            change = rng.choice(("rename", "drop", "add"))
            if change == "rename":
                pod[at] = NodeResources(pod[at].name + "x", _cores(4, False), 2 << 30)
            elif change == "drop":
                del pod[at]
            else:
                pod.insert(at + 1, NodeResources(f"{pod[at].name}-{step}", _cores(3, False), 2 << 30))
            assert pod == sorted(pod, key=lambda node: node.name), "a snapshot's nodes are sorted by name"
            snapshot = replace(snapshot, nodes=tuple(pod))
    assert compared > 20  # live counts were compared, not only empty ones


def test_a_count_column_is_left_to_the_lookups_when_a_name_is_not_there_or_twice() -> None:
    index = NameIndex(("a", "b", "c", "d"))
    assert index.count_column({"b": 2, "d": 1}) == [0, 2, 0, 1]
    assert index.count_column({"e": 1}) is None
    assert NameIndex(("a", "b", "a", "c", "d")).count_column({"a": 1}) is None


def test_a_staged_rebuilt_with_other_nodes_builds_its_own_columns() -> None:
    staged = stage(_snapshot(), _asks()[1], AnalysisCache())
    fewer = replace(staged, nodes=staged.nodes[:3], analyses=staged.analyses[:3], usages=None)
    assert list(fewer.columns().names) == [node.name for node in staged.nodes[:3]]
    assert list(fewer.columns().capacity) == [analysis.capacity for analysis in staged.analyses[:3]]
