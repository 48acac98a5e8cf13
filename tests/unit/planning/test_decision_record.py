"""Compact decision records (docs/replay.md "A batch's snapshot, stored once"): each record of a batch names the
nodes it saw unchanged, the batch's snapshot holds them once, and `expand` gives back exactly the full record."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from eru.errors import InvalidInput
from eru.plan_api import deploy_problem
from eru.planning import NodeResources
from eru.planning.decide import decide, record, stage
from eru.planning.decision_record import RecordBook, expand, snapshot_of
from eru.planning.plan import Plan
from eru.planning.snapshot import ClusterSnapshot, DeployAsk

RECORDED: list[dict[str, Any]] = json.loads((Path(__file__).parents[2] / "fixtures" / "decisions.json").read_text())


def _batch(snapshot: ClusterSnapshot, asks: list[DeployAsk]) -> tuple[list[str], list[str], RecordBook]:
    """Decide `asks` in order as the allocator does (each against the snapshot the previous left); the full and the
    compact record of each."""
    book = RecordBook("snap-1", snapshot.nodes)
    full, compact = [], []
    for ask in asks:
        staged = stage(snapshot, ask)
        full.append(record(staged))
        compact.append(book.record(staged))
        outcome = decide(snapshot, ask)
        if isinstance(outcome, Plan):
            snapshot = snapshot.charged(ask, outcome.containers, outcome.placements)
    return full, compact, book


def test_a_batch_of_compact_records_expands_to_the_full_records_and_replays() -> None:
    snapshot, first = deploy_problem(RECORDED[0]["input"])  # auto 5 × 1.3 bound cores over n1, n2, n3
    second = replace(first, count=1)
    asks = [first, second, replace(first, count=2, mode="fill"), second]
    full, compact, book = _batch(snapshot, asks)
    stored = book.snapshot()
    assert stored is not None
    nodes = json.loads(stored)
    for whole, short in zip(full, compact, strict=True):
        problem = json.loads(short)
        assert snapshot_of(problem) == ("snap-1" if any(isinstance(n, str) for n in problem["nodes"]) else None)
        assert expand(problem, nodes) == json.loads(whole)
        replayed = decide(*deploy_problem(expand(problem, nodes))).answer()  # what `eru replay` runs
        assert replayed == decide(*deploy_problem(json.loads(whole))).answer()
    first_record = json.loads(compact[0])
    assert first_record["nodes"] == ["n1", "n2", "n3"], "nothing charged yet: every node named"
    later = json.loads(compact[1])
    assert all(isinstance(entry, dict) for entry in later["nodes"]), "the first request charged all three nodes"
    assert sorted(nodes) == ["n1", "n2", "n3"]
    assert all("count" not in node for node in nodes.values()), "counts are per request, in the records"


def test_counts_of_named_nodes_are_in_the_record() -> None:
    snapshot, ask = deploy_problem(RECORDED[0]["input"])
    snapshot = replace(snapshot, counts={ask.workload: {"n2": 4}})
    (whole,), (short,), book = _batch(snapshot, [ask])
    problem = json.loads(short)
    assert problem["snapshot_counts"] == {"n2": 4}
    assert expand(problem, json.loads(book.snapshot() or "{}")) == json.loads(whole)


def test_a_thousand_node_record_shrinks_to_names() -> None:
    snapshot, ask = deploy_problem(RECORDED[0]["input"])
    template = snapshot.nodes[0]
    cores = {str(core): 100 for core in range(32)}
    many = tuple(
        NodeResources(**{**_fields(template), "name": f"sim-{index:04d}", "cpu_map": cores}) for index in range(1000)
    )
    snapshot = replace(snapshot, nodes=many)
    (whole,), (short,), book = _batch(snapshot, [replace(ask, count=1)])
    assert len(short) * 20 < len(whole)
    assert expand(json.loads(short), json.loads(book.snapshot() or "{}")) == json.loads(whole)


def _fields(node: NodeResources) -> dict[str, Any]:
    return {name: getattr(node, name) for name in node.__dataclass_fields__}


def test_a_record_without_named_nodes_is_a_full_record_and_stores_no_snapshot() -> None:
    problem = RECORDED[0]["input"]
    assert expand(problem, None) == problem
    assert RecordBook("unused", ()).snapshot() is None


@pytest.mark.parametrize(
    ("problem", "nodes", "field"),
    [
        ({"snapshot": "s", "nodes": ["n1"]}, None, "input.snapshot"),
        ({"snapshot": "s", "nodes": ["n9"]}, {"n1": {}}, "input.nodes[0]"),
        ({"snapshot": "s", "nodes": "n1"}, {"n1": {}}, "input.nodes"),
        ({"snapshot": "s", "snapshot_counts": [1], "nodes": ["n1"]}, {"n1": {}}, "input.snapshot_counts"),
        ({"snapshot": 7, "nodes": []}, {}, "input.snapshot"),
    ],
)
def test_a_broken_compact_record_names_the_field(problem: dict[str, Any], nodes: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        expand(problem, nodes)
    assert caught.value.details["field"] == field
