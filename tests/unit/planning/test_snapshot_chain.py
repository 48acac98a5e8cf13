"""A batch's stored snapshot as a change of the pod's last one (`eru.planning.decision_record.SnapshotChain`,
docs/replay.md "A batch's snapshot, stored once"): the row holds only the nodes that differ, a reader lays the
chain back whole, and every record expands to exactly its full record."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from eru.errors import InvalidInput
from eru.plan_api import deploy_problem
from eru.planning.decide import decide, record, stage
from eru.planning.decision_record import (
    BASE_KEY,
    MAX_BASE_AGE,
    MAX_CHAIN,
    MAX_DEPTH,
    RecordBook,
    SnapshotChain,
    expand,
    merged,
)
from eru.planning.plan import Plan
from eru.planning.snapshot import ClusterSnapshot, DeployAsk

RECORDED: list[dict[str, Any]] = json.loads((Path(__file__).parents[2] / "fixtures" / "decisions.json").read_text())


def _single() -> tuple[ClusterSnapshot, DeployAsk]:
    snapshot, ask = deploy_problem(RECORDED[0]["input"])  # 3 nodes
    return snapshot, replace(ask, count=1)  # charges one node of three per batch


def _batch(
    snapshot: ClusterSnapshot, ask: DeployAsk, snap_id: str, chain: SnapshotChain | None, now: float = 0.0
) -> tuple[str, str, dict[str, Any], RecordBook, ClusterSnapshot]:
    """One batch of one request: its full record, its compact one, its stored row, the book, the next snapshot."""
    book = RecordBook(snap_id, snapshot.nodes, None, chain, now)
    staged = stage(snapshot, ask)
    full, compact = record(staged), book.record(staged)
    row = book.snapshot()
    assert row is not None
    outcome = decide(snapshot, ask)
    assert isinstance(outcome, Plan)
    return full, compact, json.loads(row), book, snapshot.charged(ask, outcome.containers, outcome.placements)


def test_later_rows_hold_only_the_changed_nodes_and_every_record_expands_to_its_full_record() -> None:
    snapshot, ask = _single()
    chain = SnapshotChain()
    rows: dict[str, dict[str, Any]] = {}
    previous = snapshot
    for index in range(4):
        snap_id = f"snap-{index}"
        full, compact, row, book, after = _batch(snapshot, ask, snap_id, chain)
        book.stored()
        rows[snap_id] = row
        changed = sorted(n.name for n, was in zip(snapshot.nodes, previous.nodes, strict=True) if n is not was)
        if index == 0:
            assert BASE_KEY not in row
            assert sorted(row) == ["n1", "n2", "n3"]
        else:  # only the node the previous batch charged, over the previous row
            assert row[BASE_KEY] == f"snap-{index - 1}"
            assert sorted(name for name in row if name != BASE_KEY) == changed
            assert len(changed) == 1
        chain_rows = [rows[f"snap-{i}"] for i in range(index, -1, -1)]
        problem = json.loads(compact)
        assert expand(problem, merged(chain_rows)) == json.loads(full)
        replayed = decide(*deploy_problem(expand(problem, merged(chain_rows)))).answer()  # what `eru replay` runs
        assert replayed == decide(*deploy_problem(json.loads(full))).answer()
        previous, snapshot = snapshot, after


def test_a_row_not_committed_is_never_a_base() -> None:
    snapshot, ask = _single()
    chain = SnapshotChain()
    _, _, _, first, after = _batch(snapshot, ask, "snap-a", chain)
    first.stored()
    _, _, lost, _, _ = _batch(after, ask, "snap-lost", chain)  # its transaction failed: `stored` never called
    assert lost[BASE_KEY] == "snap-a"
    _, _, row, _, _ = _batch(after, ask, "snap-b", chain)
    assert row[BASE_KEY] == "snap-a"


@pytest.mark.parametrize("why", ["old", "deep", "node gone"])
def test_a_full_row_again_when_the_chain_cannot_serve(why: str) -> None:
    snapshot, ask = _single()
    chain = SnapshotChain()
    _, _, _, first, after = _batch(snapshot, ask, "snap-a", chain, now=100.0)
    first.stored()
    now = 100.0
    if why == "old":
        now += MAX_BASE_AGE + 1
    elif why == "deep":
        chain.depth = MAX_DEPTH
    else:
        after = replace(after, nodes=after.nodes[:-1])  # a node left the pod
    _, _, row, _, _ = _batch(after, ask, "snap-b", chain, now=now)
    assert BASE_KEY not in row
    assert sorted(row) == sorted(node.name for node in after.nodes)


@pytest.mark.parametrize(
    ("rows", "why"),
    [
        ([], "chain of 1 to"),
        ([{BASE_KEY: "snap-a", "n1": {}}], "base snapshot 'snap-a' is not recorded"),
        ([{BASE_KEY: "x", "n1": {}}] * (MAX_CHAIN + 1), "chain of 1 to"),
        ([{BASE_KEY: 7}], "expected a snapshot id"),
    ],
)
def test_a_broken_chain_names_the_snapshot(rows: list[dict[str, Any]], why: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        merged(rows)
    assert caught.value.details["field"] in ("input.snapshot", f"snapshot.{BASE_KEY}")
    assert why in caught.value.message
