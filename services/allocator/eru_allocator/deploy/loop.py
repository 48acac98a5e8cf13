"""The deploy loop in Nomad's shape (docs/pipeline.md "The deploy loop"): snapshot → decide → `Plan` →
`submit_plan` → `PlanResult`, and again with the refreshed snapshot for what was rejected.

`eru_allocator.deploy.confirm` takes the snapshot and decides the batch (each request against the snapshot as the
previous ones left it, the distributor confirming the placements); this module submits what was decided. The store
re-checks only the nodes the plan touches (eru.store.plans) and commits every request whose nodes all still fit; a
request on a rejected node is decided again, alone with the others rejected, against the snapshot the store read
after that commit. A round that commits nothing counts as a failure; after `RETRY_MAX` failures in a row the batch
is given back to the consumer (`Retryable`: what was committed is answered from its keys on the redelivery). A round
that commits something resets the count (Nomad's `progressMade`). Waiting is an outcome the decision already
recorded (a `waiting` deploy and its wait row), committed like any other answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from eru.bus import Retryable
from eru.domain import Accepted
from eru.errors import EruError
from eru.planning.snapshot import ClusterSnapshot
from eru.store.plans import Plan
from eru.store.protocol import PodSession, PodWrites, SnapshotNeeds

log = structlog.get_logger()

RETRY_MAX = 5
"""Rounds in a row that may commit nothing before the batch is given back (Nomad's `maxServiceScheduleAttempts`)."""

Answer = Accepted | EruError


class Decision(Protocol):
    """A batch (or the part of it decided again) ready to submit: `deploy.decision.PodPlan`."""

    def plan(self, pod: str, needs: SnapshotNeeds) -> Plan:
        """The decided requests as a `Plan`, one part per request in order."""
        ...


@dataclass(frozen=True, slots=True)
class Decided:
    """Requests of the batch (`indexes`, in order) decided: the decision and their answers, one per request."""

    decision: Decision
    answers: Sequence[Answer]
    indexes: tuple[int, ...]


Replan = Callable[[ClusterSnapshot, tuple[int, ...]], Awaitable[Decided]]
"""Decide the batch's requests at these indexes again against this snapshot."""


@dataclass(slots=True)
class Submitted:
    """What the loop did: an answer per request of the batch, the rows written (one `PodWrites` per round that
    committed), the rounds and the nodes rejected over them."""

    answers: list[Answer]
    written: list[PodWrites] = field(default_factory=list)
    rounds: int = 0
    rejected: dict[str, str] = field(default_factory=dict)
    first_committed: bool = False
    """Whether the first round wrote rows (with them its decision snapshot, which the pod's `SnapshotChain` may
    then take as the base of later rows: a row never written must never be one)."""


async def submit_until_placed(
    session: PodSession,
    pod: str,
    needs: SnapshotNeeds,
    first: Decided,
    replan: Replan,
    keys: Sequence[str],
    retry_max: int = RETRY_MAX,
) -> Submitted:
    """Submit `first` (the whole batch: its `indexes` are every request's) and decide again what the store rejects
    until everything is committed (see the module doc); `keys[i]` is request i's key (requests that share a key
    share the answer of the one decided)."""
    done = Submitted(list(first.answers))
    decided, failures = first, 0
    while True:
        result = await session.submit_plan(decided.decision.plan(pod, needs))
        done.rounds += 1
        if result.written is not None:
            done.written.append(result.written)
        committed = frozenset(result.committed)
        if decided is first and committed:
            done.first_committed = True
        if decided is not first:  # decided again: a repeated key is answered as the request decided
            again = {keys[i]: decided.answers[part] for part, i in enumerate(decided.indexes) if part in committed}
            for index, key in enumerate(keys):
                if key in again:
                    done.answers[index] = again[key]
        if result.full_commit:
            return done
        done.rejected.update(result.rejected_nodes)
        failures = 0 if committed else failures + 1
        dropped = tuple(index for part, index in enumerate(decided.indexes) if part not in committed)
        log.info(
            "deploy.plan_rejected",
            pod=pod,
            rejected=dict(result.rejected_nodes),
            committed=len(committed),
            again=len(dropped),
            failures=failures,
        )
        if failures >= retry_max or result.refreshed_snapshot is None:
            raise Retryable(f"nodes changed under {failures} plans in a row; retrying the batch", delay=0.1)
        decided = await replan(result.refreshed_snapshot, dropped)
