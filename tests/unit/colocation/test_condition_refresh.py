"""When an unchanged condition goes again (docs/colocation.md "Conditions"): every `condition_refresh_seconds` while
the node runs batch containers, every `condition_floor_seconds` otherwise, and at once when the sample's batch
containers differ from those of the last condition's sample."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from eru.colocation.config import ColocationConfig
from eru.colocation.tracker import NodeTracker
from eru.domain import ContainerMetrics, NodeMetrics
from eru.settings import EvictionSettings

GIB = 1024**3
CONFIG = ColocationConfig(
    window_seconds=10,
    metrics_interval_seconds=1,
    reservation_startup_seconds=5,
    reservation_half_life_seconds=2,
    reservation_peak_window_seconds=3,
    room_horizon_seconds=0,
)


def container(cid: str, priority_class: str, cpu_request: float) -> ContainerMetrics:
    return ContainerMetrics(
        container_id=cid,
        priority_class=priority_class,
        priority=0,
        tenant="t",
        cpu_used=cpu_request / 2,
        memory_used=GIB // 4,
        cpu_request=cpu_request,
        memory_request=GIB // 2,
    )


def sample(at: float, *containers: ContainerMetrics) -> NodeMetrics:
    return NodeMetrics(
        node="n1",
        time=at,
        cpu_capacity=32,
        cpu_used=1.0 + sum(c.cpu_used for c in containers),
        memory_used=4 * GIB,
        memory_total=64 * GIB,
        containers=list(containers),
    )


def conditions_at(tracker: NodeTracker, times: list[float], *containers: ContainerMetrics) -> list[float]:
    """The times of `times` whose sample (of `containers`) brought a condition."""
    sent = []
    for at in times:
        if tracker.observe(sample(at, *containers), at).condition is not None:
            sent.append(at)
    return sent


PROD = container("p1", "prod", 0.1)


def test_a_node_without_batch_sends_its_unchanged_condition_at_the_floor() -> None:
    tracker = NodeTracker("n1", CONFIG, condition_refresh_seconds=30, condition_floor_seconds=300)
    sent = conditions_at(tracker, [float(t) for t in range(100, 800, 25)], PROD)
    # the first, then every 300 s: not at every 30 s as a node with batch containers
    assert sent == [100.0, 400.0, 700.0]


def test_a_node_with_batch_refreshes_its_condition_every_refresh_period() -> None:
    tracker = NodeTracker("n1", CONFIG, condition_refresh_seconds=30, condition_floor_seconds=300)
    batch = container("b1", "batch", 0.1)
    sent = conditions_at(tracker, [float(t) for t in range(100, 230, 10)], PROD, batch)
    assert sent == [100.0, 130.0, 160.0, 190.0, 220.0]


def test_a_batch_container_that_starts_after_the_condition_brings_one_at_the_next_sample() -> None:
    # The allocator counts batch instances created after the condition's time; one created before it that was not
    # yet running was counted by neither side until the next condition (docs/colocation.md "Known gap"). Its first
    # sample is a new condition now, though its 0.1 core moves the capacity by far less than the 5 % step.
    tracker = NodeTracker("n1", CONFIG, condition_refresh_seconds=30, condition_floor_seconds=300)
    assert conditions_at(tracker, [100.0, 101.0], PROD) == [100.0]
    batch = container("b1", "batch", 0.1)
    assert conditions_at(tracker, [102.0, 103.0], PROD, batch) == [102.0]
    condition = tracker.last_condition
    assert condition is not None
    assert condition.time == 102.0
    # and when it leaves, at once again
    assert conditions_at(tracker, [104.0, 105.0], PROD) == [104.0]


def test_a_change_of_prod_containers_alone_waits_for_the_floor() -> None:
    tracker = NodeTracker("n1", CONFIG, condition_refresh_seconds=30, condition_floor_seconds=300)
    assert conditions_at(tracker, [100.0], PROD) == [100.0]
    # a small prod container arrives: its reservation moves the capacity by less than the step
    assert conditions_at(tracker, [125.0, 150.0, 175.0], PROD, container("p2", "prod", 0.1)) == []


def test_the_floor_below_the_refresh_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError) as raised:
        EvictionSettings(condition_refresh_seconds=30, condition_floor_seconds=10)
    assert "condition_floor_seconds" in str(raised.value)
    assert "must be at least condition_refresh_seconds (30)" in str(raised.value)
