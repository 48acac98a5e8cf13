"""The allocator's pure rules: container transitions, a deploy's terminal outcome, and batching (no servers)."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Sequence

import pytest

from eru_allocator.containers.lifecycle import deploy_outcome, holds_resources, transition
from eru_allocator.flow.batcher import Batcher


@pytest.mark.parametrize(
    ("state", "event", "new_state", "releases"),
    [
        ("planned", "started", "running", False),
        ("planned", "failed", "failed", True),
        ("running", "failed", "failed", True),
        ("running", "removed", "removed", True),
        ("stopping", "removed", "removed", True),
        ("running", "paused", "paused", False),
        ("paused", "unpaused", "running", False),
        ("updating", "updated", "running", False),
    ],
)
def test_transitions(state: str, event: str, new_state: str, releases: bool) -> None:
    change = transition(state, event)
    assert change is not None
    assert change.state == new_state
    assert change.releases is releases


@pytest.mark.parametrize(
    ("state", "event"),
    [("removed", "started"), ("failed", "removed"), ("running", "started"), ("stopping", "failed"), ("x", "stopped")],
)
def test_stale_or_repeated_events_change_nothing(state: str, event: str) -> None:
    assert transition(state, event) is None


def test_a_refused_update_restores_instead_of_failing() -> None:
    change = transition("updating", "failed", updating=True)
    assert change is not None
    assert change.state == "running"
    assert change.restore_previous
    assert not change.releases


def test_who_holds_resources() -> None:
    assert holds_resources("planned", False)
    assert holds_resources("stopping", False)
    assert not holds_resources("failed", False)
    assert not holds_resources("planned", True)  # a pending replacement holds nothing of its own


def test_deploy_outcomes() -> None:
    assert deploy_outcome([("a", "running", None), ("b", "planned", None)]) is None
    done = deploy_outcome([("b", "running", None), ("a", "running", None)])
    assert done is not None
    assert (done.kind, done.started, done.failed) == ("completed", ["a", "b"], {})
    partial = deploy_outcome([("a", "running", None), ("b", "failed", "image pull failed")])
    assert partial is not None
    assert (partial.kind, partial.failed) == ("partial", {"b": "image pull failed"})
    failed = deploy_outcome([("a", "failed", None), ("b", "removed", "removed by operator")])
    assert failed is not None
    assert (failed.kind, failed.started, failed.failed) == ("failed", [], {"a": "failed", "b": "removed by operator"})


async def test_batcher_groups_concurrent_calls_per_key_and_fails_a_batch_together() -> None:
    calls: list[tuple[Hashable, list[int]]] = []

    async def process(key: Hashable, items: Sequence[int]) -> list[int]:
        calls.append((key, list(items)))
        await asyncio.sleep(0.01)
        if 13 in items:
            raise RuntimeError("unlucky batch")
        return [item * 10 for item in items]

    batcher: Batcher[int, int] = Batcher(process, max_batch=3)
    results = await asyncio.gather(*(batcher.submit(i % 2, i) for i in range(8)), return_exceptions=True)
    assert results == [0, 10, 20, 30, 40, 50, 60, 70]
    assert all(len(items) <= 3 for _, items in calls)
    assert len(calls) < 8  # concurrent calls shared batches
    assert sorted(i for _, items in calls for i in items) == list(range(8))
    outcome = await asyncio.gather(batcher.submit("k", 12), batcher.submit("k", 13), return_exceptions=True)
    assert all(isinstance(o, RuntimeError) for o in outcome)
    assert await batcher.submit("k", 1) == 10  # the key keeps working after a failed batch


async def test_batcher_keeps_a_batch_within_its_weight() -> None:
    calls: list[list[int]] = []

    async def process(_key: Hashable, items: Sequence[int]) -> list[int]:
        calls.append(list(items))
        return list(items)

    batcher: Batcher[int, int] = Batcher(process, max_batch=10, weight=lambda item: item, max_weight=100)
    sizes = [60, 30, 20, 150, 5, 5]
    assert await asyncio.gather(*(batcher.submit("pod", size) for size in sizes)) == sizes
    # in arrival order: 60+30 fit, 20 would pass 100; a 150 alone (too heavy, but at least one item); then 5+5
    assert calls == [[60, 30], [20], [150], [5, 5]]
