"""Planning a pod's next batch while the current one commits (docs/pipeline.md "Performance").

A batch holds its pod's lock from the snapshot to the commit; PostgreSQL's share of that (the rows of 128 requests)
is as long as the planning. So batch n + 1 is decided *ahead*, before it has the lock: against the snapshot batch n
will leave once committed (n's final, charged snapshot), with the distributor's confirmation asked meanwhile. When n
has committed, n + 1 takes the lock and reads the pod as always; the plan made ahead is submitted only if what it
assumed is what it finds — the same snapshot, the same pod policy, and none of its request keys already settled —
so every decision is still the one the committed state gives, recorded with its own input. Otherwise (an event,
an admission pass or a heartbeat changed the pod, n failed, a key was a redelivery) it is decided again under the
lock, as without planning ahead.

`PodLine` orders the batches of a pod: each batch joins as a `Turn`, learns the previous batch's final snapshot
(`planned`) and waits for its end (`done`) before taking the lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from eru.domain import DeployRequest
from eru.planning import NormalizedRequest
from eru.planning.snapshot import ClusterSnapshot


@dataclass(frozen=True, slots=True)
class Basis:
    """What a batch leaves behind for the next one: the pod's policy object as read and the snapshot after its
    plans."""

    policy: Mapping[str, Any]
    snapshot: ClusterSnapshot


@dataclass
class Turn:
    """One batch's place in its pod's line."""

    planned: asyncio.Future[Basis | None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    """The batch's `Basis` once it has planned and only commits (None: it will not commit a known state)."""
    done: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    """Resolved when the batch's transaction has ended (committed or rolled back)."""

    def plan_known(self, basis: Basis | None) -> None:
        """Tell the next batch what this one will leave (once)."""
        if not self.planned.done():
            self.planned.set_result(basis)

    def end(self) -> None:
        """The batch's transaction is over."""
        self.plan_known(None)
        if not self.done.done():
            self.done.set_result(None)


class PodLine:
    """The batches of each pod in the order they started."""

    def __init__(self) -> None:
        self._last: dict[str, Turn] = {}
        self.ahead_used = 0  # batches submitted as decided ahead
        self.ahead_missed = 0  # batches decided ahead, then again under the lock (the pod had changed)

    def join(self, pod: str) -> tuple[Turn | None, Turn]:
        """(the batch before this one if it is still running, this batch's turn)."""
        previous = self._last.get(pod)
        turn = self._last[pod] = Turn()
        return (previous if previous is not None and not previous.done.done() else None), turn

    def leave(self, pod: str, turn: Turn) -> None:
        """End `turn` and forget it if no later batch joined."""
        turn.end()
        if self._last.get(pod) is turn:
            del self._last[pod]


def may_plan_ahead(items: Sequence[tuple[DeployRequest, NormalizedRequest, Any]]) -> bool:
    """Requests that wait for admission read the store while planning, and batch requests' eviction memory is
    relative to the clock, and node filters read the nodes' labels: their batches are not planned ahead (they are
    decided when their turn comes, eru_allocator.deploy.confirm)."""
    return all(
        req.wait_seconds <= 0 and not normalized.batch and req.node_filter is None for req, normalized, _ in items
    )


@dataclass
class Ahead:
    """A batch decided before it had the lock (`decision.PodPlan` and its answers), and what it assumed."""

    basis: Basis
    state: Any
    answers: list[Any]

    def holds(self, policy_object: Mapping[str, Any], existing: Mapping[str, Any], snapshot: ClusterSnapshot) -> bool:
        """Whether the pod as read under the lock is what the batch was decided against: the same policy and
        snapshot, and none of its request keys settled meanwhile (a redelivery is answered from the store)."""
        return not existing and policy_object == self.basis.policy and snapshot == self.basis.snapshot


__all__ = ["Ahead", "Basis", "PodLine", "Turn", "may_plan_ahead"]
