"""NodeTracker: one node's state between samples and the messages each sample calls for (pure, `now` given)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from eru.colocation.config import ColocationConfig
from eru.colocation.plan_kind import solve_evict
from eru.colocation.tracker import NodeTracker
from eru.domain import ContainerMetrics, NodeMetrics
from eru.errors import InvalidInput

GIB = 1024**3
CONFIG = ColocationConfig(
    cpu_forbid=60,
    cpu_suppress=70,
    cpu_evict=70,
    window_seconds=10,
    metrics_interval_seconds=1,
    cpu_cooldown_seconds=2,
    reservation_startup_seconds=5,
    reservation_half_life_seconds=2,
    reservation_peak_window_seconds=3,
)


def sample(at: float, *, node_cpu: float, batch: dict[str, float], allowed: float | None = None) -> NodeMetrics:
    containers = [
        ContainerMetrics(
            container_id="p1",
            priority_class="prod",
            priority=0,
            tenant="t",
            cpu_used=2.0,
            memory_used=4 * GIB,
            cpu_request=8,
            memory_request=8 * GIB,
        )
    ] + [
        ContainerMetrics(
            container_id=cid,
            priority_class="batch",
            priority=index,
            tenant="t",
            cpu_used=used,
            memory_used=GIB,
            cpu_request=4,
            memory_request=2 * GIB,
        )
        for index, (cid, used) in enumerate(sorted(batch.items()))
    ]
    return NodeMetrics(
        node="n1",
        time=at,
        cpu_capacity=32,
        cpu_used=node_cpu,
        memory_used=20 * GIB,
        memory_total=64 * GIB,
        batch_cpu_allowed=allowed,
        containers=containers,
    )


BATCH = {"b0": 2.0, "b1": 2.0, "b2": 2.0}
STARVED = {cid: 4.4 / 3 for cid in BATCH}


def test_a_pressured_node_is_suppressed_then_the_lowest_priorities_evicted_and_the_input_replays() -> None:
    tracker = NodeTracker("n1", CONFIG)
    first = tracker.observe(sample(100.0, node_cpu=24.0, batch=BATCH), 100.0)
    updates = [c for c in first.commands if c.kind == "suppress"]
    assert sum(c.cpu_quota or 0 for c in updates) == pytest.approx(4.4, abs=1e-5)
    assert [e.kind for e in first.events] == ["suppress"]
    evictions = []
    for step in range(1, 30):
        outcome = tracker.observe(sample(100.0 + step, node_cpu=22.4, batch=STARVED), 100.0 + step)
        evictions += [e for e in outcome.events if e.kind == "evict"]
    assert len(evictions) == 1  # one round; the victims are pending afterwards and not chosen again
    event = evictions[0]
    assert [v.container_id for v in event.victims] == ["b0", "b1"]
    assert [v["id"] for v in solve_evict(event.input)["evict"]] == ["b0", "b1"]
    assert tracker.last_condition is not None
    assert tracker.last_condition.state == "evicting"


def test_duplicate_and_stale_samples_change_nothing() -> None:
    tracker = NodeTracker("n1", CONFIG)
    assert tracker.observe(sample(100.0, node_cpu=24.0, batch=BATCH), 100.0).commands
    repeat = tracker.observe(sample(100.0, node_cpu=30.0, batch=BATCH), 100.1)
    assert not repeat.accepted
    assert repeat.commands == []
    too_old = tracker.observe(sample(89.0, node_cpu=30.0, batch=BATCH), 100.2)
    assert not too_old.accepted


def test_a_late_sample_joins_the_window_without_a_new_decision() -> None:
    tracker = NodeTracker("n1", CONFIG)
    tracker.observe(sample(100.0, node_cpu=10.0, batch=BATCH), 100.0)
    tracker.observe(sample(102.0, node_cpu=10.0, batch=BATCH), 102.0)
    late = tracker.observe(sample(101.0, node_cpu=31.0, batch=BATCH), 102.1)
    assert late.accepted
    assert late.decision is None
    assert [p.time for p in tracker.window.points()] == [100.0, 101.0, 102.0]


def test_a_stale_newest_sample_commands_nothing() -> None:
    tracker = NodeTracker("n1", CONFIG)
    outcome = tracker.observe(sample(100.0, node_cpu=24.0, batch=BATCH), 103.0)  # 3 s old > 2 intervals
    assert outcome.accepted
    assert outcome.commands == []
    assert outcome.condition is None  # nor a condition: the sample says nothing about the node now


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"cpu_used": math.nan}, "cpu_used"),
        ({"cpu_capacity": 0.0}, "cpu_capacity"),
        ({"memory_used": -1}, "memory_used"),
        ({"node": "n2"}, "node"),
    ],
)
def test_bad_samples_are_refused_naming_the_field(change: dict[str, object], field: str) -> None:
    tracker = NodeTracker("n1", CONFIG)
    with pytest.raises(InvalidInput) as caught:
        tracker.observe(sample(100.0, node_cpu=10.0, batch=BATCH).model_copy(update=change), 100.0)
    assert caught.value.field == field
    assert len(tracker.window) == 0


def test_batch_capacity_grows_as_the_prod_reservation_decays() -> None:
    # Reservations only (no peak sizing): the room under the LS peak is tested in test_keep_budget_room.py.
    tracker = NodeTracker("n1", replace(CONFIG, room_horizon_seconds=0), condition_refresh_seconds=1)
    capacities = []
    for step in range(30):
        tracker.observe(sample(100.0 + step, node_cpu=5.0, batch={"b0": 0.5}), 100.0 + step)
        assert tracker.last_condition is not None
        capacities.append(tracker.last_condition.batch_cpu_capacity)
    # During start-up prod reserves its whole 8-core request: 32 - 8 - 4 (batch request) = 20 cores for batch.
    assert capacities[0] == pytest.approx(20.0)
    # Afterwards the reservation decays toward prod's peak (2 cores) + 10 % of its request: 32 - 2.8 - 4.
    assert capacities[-1] == pytest.approx(32 - 2.8 - 4, abs=0.05)
    assert capacities[-1] > capacities[0]
