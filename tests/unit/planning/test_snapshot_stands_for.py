"""`ClusterSnapshot.stands_for`: whether a decision made against one read of a pod stands for a later read (the
deploy batch's read under the pod's lock, docs/pipeline.md "The pod lock and the distributor")."""

from __future__ import annotations

from dataclasses import replace

from eru.colocation.backoff import Eviction, KeepConfig, avoided_nodes
from eru.planning import NodeResources, PlanningConfig
from eru.planning.snapshot import ClusterSnapshot, EvictionHistory

KEEP = KeepConfig()
NODES = (NodeResources("n1", {"0": 100}, 1 << 30), NodeResources("n2", {"0": 100}, 1 << 30))
EVICTED = (Eviction("web", "web-1", "n1", 1000.0),)


def _snapshot(now: float, history: tuple[Eviction, ...] = EVICTED) -> ClusterSnapshot:
    return ClusterSnapshot(PlanningConfig(), NODES, evictions=EvictionHistory(now, history, KEEP))


def test_the_same_read_stands() -> None:
    assert _snapshot(1010.0).stands_for(_snapshot(1010.0))
    assert ClusterSnapshot(PlanningConfig(), NODES).stands_for(ClusterSnapshot(PlanningConfig(), NODES))


def test_an_earlier_instant_with_the_same_evictions_stands_for_a_later_one() -> None:
    earlier, later = _snapshot(1010.0), _snapshot(1010.5)
    assert earlier.stands_for(later)
    assert not later.stands_for(earlier)  # a later instant may no longer avoid what the earlier read must
    # what makes it sound: the earlier instant avoids every node the later one does
    for now in (1010.0, 1000.0 + KEEP.avoid_seconds - 1):
        assert avoided_nodes(EVICTED, "web", now + 1, KEEP).keys() <= avoided_nodes(EVICTED, "web", now, KEEP).keys()


def test_another_eviction_or_node_change_does_not_stand() -> None:
    more = (*EVICTED, Eviction("web", "web-2", "n2", 1010.2))
    assert not _snapshot(1010.0).stands_for(_snapshot(1010.5, more))
    changed = replace(_snapshot(1010.5), nodes=(NODES[0],))
    assert not _snapshot(1010.0).stands_for(changed)
    assert not ClusterSnapshot(PlanningConfig(), NODES).stands_for(ClusterSnapshot(PlanningConfig(), NODES[:1]))
