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
from eru.planning.decision_record import ALL_KEY, FROM_KEY, RecordBook, expand, snapshot_of
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
        refers = problem.get(ALL_KEY) or any(isinstance(n, str) or FROM_KEY in n for n in problem["nodes"])
        assert snapshot_of(problem) == ("snap-1" if refers else None)
        assert expand(problem, nodes) == json.loads(whole)
        replayed = decide(*deploy_problem(expand(problem, nodes))).answer()  # what `eru replay` runs
        assert replayed == decide(*deploy_problem(json.loads(whole))).answer()
    first_record = json.loads(compact[0])
    assert first_record[ALL_KEY] is True
    assert first_record["nodes"] == [], "nothing charged yet: every node is the snapshot's"
    later = json.loads(compact[1])
    assert all(isinstance(entry, dict) for entry in later["nodes"]), "the first request charged all three nodes"
    assert all(set(entry) == {FROM_KEY, "used", "count"} for entry in later["nodes"]), "only what charging changed"
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


def test_a_batch_of_singles_records_charged_nodes_as_their_change() -> None:
    """16 nodes of 64 cores, 48 singles: once every node is charged, a record in full repeats 16 whole nodes; the
    compact one names what each charged node uses now, and still expands to the full record and replays the same."""
    snapshot, ask = deploy_problem(RECORDED[0]["input"])
    template = snapshot.nodes[0]
    cores = {str(core): 100 for core in range(64)}
    many = tuple(
        NodeResources(**{**_fields(template), "name": f"sim-{index:03d}", "cpu_map": cores}) for index in range(16)
    )
    snapshot = replace(snapshot, nodes=many)
    full, compact, book = _batch(snapshot, [replace(ask, count=1)] * 48)
    nodes = json.loads(book.snapshot() or "{}")
    assert sorted(nodes) == [node.name for node in many]
    for whole, short in zip(full, compact, strict=True):
        assert expand(json.loads(short), nodes) == json.loads(whole)
    assert all(isinstance(entry, dict) and FROM_KEY in entry for entry in json.loads(compact[-1])["nodes"])
    assert len(compact[-1]) * 5 < len(full[-1])


def test_a_record_of_every_node_writes_only_the_charged_ones() -> None:
    """5,000 nodes, a batch of 4 requests of 100: a record holds no node name, only the nodes the batch's earlier
    requests charged (at most 300), and still expands to the full record."""
    snapshot, ask = deploy_problem(RECORDED[0]["input"])
    template = snapshot.nodes[0]
    cores = {str(core): 100 for core in range(32)}
    many = tuple(
        NodeResources(**{**_fields(template), "name": f"sim-{index:05d}", "cpu_map": cores}) for index in range(5000)
    )
    snapshot = replace(snapshot, nodes=many)
    full, compact, book = _batch(snapshot, [replace(ask, count=100)] * 4)
    nodes = json.loads(book.snapshot() or "{}")
    assert sorted(nodes) == [node.name for node in many]
    for index, (whole, short) in enumerate(zip(full, compact, strict=True)):
        problem = json.loads(short)
        assert problem[ALL_KEY] is True
        assert len(problem["nodes"]) == 100 * index, "only the nodes charged by the requests before it"
        assert all(FROM_KEY in entry for entry in problem["nodes"])
        assert expand(problem, nodes) == json.loads(whole)
    assert len(compact[0]) < 1000


def test_a_request_that_leaves_a_node_out_names_the_others() -> None:
    """A request that may not use every node (here one node at a batch watermark) names the nodes it uses."""
    snapshot, ask = deploy_problem(RECORDED[0]["input"])
    forbid = replace(snapshot, forbid_batch=frozenset({"n2"}))
    batch = replace(ask, request=replace(ask.request, batch=True))
    (whole,), (short,), book = _batch(forbid, [batch])
    problem = json.loads(short)
    assert ALL_KEY not in problem
    assert problem["nodes"] == ["n1", "n3"]
    assert expand(problem, json.loads(book.snapshot() or "{}")) == json.loads(whole)


def test_a_node_whose_capacity_changed_is_written_in_full() -> None:
    snapshot, ask = deploy_problem(RECORDED[0]["input"])
    book = RecordBook("snap-1", snapshot.nodes)
    first = snapshot.nodes[0]
    grown = replace(first, memory=first.memory * 2, used_memory=first.used_memory + 1)
    changed = replace(snapshot, nodes=(grown, *snapshot.nodes[1:]))
    problem = json.loads(book.record(stage(changed, ask)))
    assert problem["nodes"][0]["name"] == first.name
    assert FROM_KEY not in problem["nodes"][0]
    assert expand(problem, json.loads(book.snapshot() or "{}")) == json.loads(record(stage(changed, ask)))


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
        ({"snapshot": "s", "nodes": [{FROM_KEY: "n9", "count": 1}]}, {"n1": {}}, f"input.nodes[0].{FROM_KEY}"),
        ({"snapshot": "s", "nodes": [{FROM_KEY: 3, "count": 1}]}, {"n1": {}}, f"input.nodes[0].{FROM_KEY}"),
        ({"snapshot": "s", ALL_KEY: True, "nodes": [{FROM_KEY: "n9", "count": 1}]}, {"n1": {}}, "input.nodes[0]"),
        ({"snapshot": "s", ALL_KEY: True, "nodes": ["n1"]}, {"n1": {}}, "input.nodes[0]"),
    ],
)
def test_a_broken_compact_record_names_the_field(problem: dict[str, Any], nodes: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        expand(problem, nodes)
    assert caught.value.details["field"] == field


def test_node_texts_shared_across_batches_are_reused_while_the_node_is_the_same() -> None:
    snapshot, ask = deploy_problem(RECORDED[0]["input"])
    single = replace(ask, count=1)
    shared: dict[str, tuple[NodeResources, str]] = {}
    first = RecordBook("snap-a", snapshot.nodes, shared)
    first.record(stage(snapshot, single))
    first.snapshot()  # the stored snapshot's texts are made when it is written
    texts = {name: text for name, (_, text) in shared.items()}
    assert sorted(texts) == ["n1", "n2", "n3"]
    outcome = decide(snapshot, single)
    assert isinstance(outcome, Plan)
    after = snapshot.charged(single, outcome.containers, outcome.placements)  # the next batch's snapshot
    second = RecordBook("snap-b", after.nodes, shared)
    second.record(stage(after, single))
    stored = second.snapshot()
    charged = set(outcome.placements)
    for node in after.nodes:
        if node.name in charged:  # a new node object: its text made again, from what it now uses
            assert shared[node.name][0] is node
            assert shared[node.name][1] != texts[node.name]
        else:  # the same object: the very text of the first batch
            assert shared[node.name][1] is texts[node.name]
    # and the stored snapshot is what a book of its own would store
    alone = RecordBook("snap-b", after.nodes)
    alone.record(stage(after, single))
    assert stored == alone.snapshot()
