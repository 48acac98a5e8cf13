"""A batch decided with one `AnalysisCache` gives exactly the decisions, slots and records it gives without one
(docs/pipeline.md "Performance"): the cache only skips re-analysing nodes the previous requests left unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from eru.planning import NodeResources, PlanningConfig, normalize_request
from eru.planning.analysis_cache import AnalysisCache
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
