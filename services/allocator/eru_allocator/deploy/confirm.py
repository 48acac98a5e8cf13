"""The unlocked step of a deploy batch (docs/pipeline.md "The pod lock and the distributor"): the pod read without
its lock, the batch decided and its placements confirmed by the distributor, then the pod read under the lock; the
decision stands if that read decides the same (`Read.stands_for`), else the batch is decided again against it from
the distributor's answers already had (`KnownPlacer`), the lock let go before any new ask. A batch planned ahead
(`decide_ahead`) is decided against the state the previous batch leaves instead."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from eru.bus import Retryable
from eru.domain import Accepted
from eru.errors import EruError, InvalidInput
from eru.planning.snapshot import ClusterSnapshot
from eru.podsecurity import PodPolicy, parse_policy
from eru.store.protocol import PodSession, SnapshotNeeds
from eru_allocator.deploy import decision
from eru_allocator.deploy.context import Context, Item
from eru_allocator.deploy.decision import PodPlan
from eru_allocator.deploy.placing import Answer as PlaceAnswer
from eru_allocator.deploy.placing import AskKey, KnownPlacer, PredictingPlacer
from eru_allocator.deploy.plan_ahead import Ahead, Basis

log = structlog.get_logger()


@dataclass(frozen=True)
class Read:
    """What a batch is decided against, as read with or without the pod's lock: the pod's policy object (None: no
    such pod), what its request keys already ended in, the snapshot, and whether requests of the pod wait (read only
    for a batch with requests that may wait)."""

    policy: Mapping[str, Any] | None
    existing: Mapping[str, Any]
    snapshot: ClusterSnapshot
    waiting: bool | None

    def stands_for(self, newer: Read) -> bool:
        """Whether a decision made against this read stands for `newer` (the pod read again under its lock): the
        same policy, request keys' outcomes and waits, and a snapshot that decides the same
        (`ClusterSnapshot.stands_for`: a batch-class batch's eviction memory is read at a new instant each time)."""
        return (
            self.policy == newer.policy
            and self.existing == newer.existing
            and self.waiting == newer.waiting
            and self.snapshot.stands_for(newer.snapshot)
        )


CONFIRM_ROUNDS = 5
"""Times in a row the pod may change between a batch's read and its read under the lock before it is given back."""


async def read_pod(
    session: PodSession, keys: Sequence[str], needs: SnapshotNeeds, items: Sequence[Item], *, lock: bool
) -> Read:
    """The pod as the batch reads it: `open_batch` (which takes the lock) or `peek_batch` (which does not)."""
    policy, existing, snapshot = await (session.open_batch if lock else session.peek_batch)(keys, needs)
    waits = await session.has_waiting(lock=lock) if policy is not None and may_wait(items) else None
    return Read(policy, existing, snapshot, waits)


def may_wait(items: Sequence[Item]) -> bool:
    return any(req.wait_seconds > 0 for req, _, _ in items)


async def pod_refusal(
    session: PodSession, pod: str, read: Read, items: Sequence[Item]
) -> list[Accepted | EruError] | None:
    """Every request's answer when the pod is unknown or its policy invalid, else None."""
    if read.policy is None:
        known = await session.pod_names(20)
        error: EruError = InvalidInput("pod", f"unknown pod {pod!r} (known: {', '.join(known) or 'none'})")
        return [error for _ in items]
    try:
        # the pod's policy object: security keys (eru.podsecurity) plus the score mode's `scorers` weights
        policy_of(read.policy)
    except InvalidInput as invalid:
        return [invalid for _ in items]
    return None


async def decide(
    ctx: Context,
    session: PodSession,
    pod: str,
    read: Read,
    items: Sequence[Item],
    needs: SnapshotNeeds,
    *,
    locked: bool,
) -> tuple[PodPlan, list[Accepted | EruError], Read] | list[Accepted | EruError]:
    """`items` decided against `read` with the distributor's answers, the pod's lock never held while the
    distributor is asked (docs/pipeline.md "The pod lock and the distributor"): the batch is decided in process
    (`KnownPlacer`: the distributor's answers to asks already made, predictions for the others); the asks not made
    before are sent in ONE request after the lock is let go (if held), and if an answer is not the prediction the
    batch is decided again, each new ask put to the distributor alone; then the pod is read under the lock. If it is
    what the batch was decided against, the decision stands; else the batch is decided again against the new read,
    under the lock, and stands if every ask it makes was answered already. Returns the decision, its answers and
    the read it was made against (or every request's answer when the pod went or its policy became invalid)."""
    keys = keys_of(items)
    known: dict[AskKey, PlaceAnswer] = {}
    distributor_seconds = 0.0
    for _ in range(CONFIRM_ROUNDS):
        refused = await pod_refusal(session, pod, read, items)
        if refused is not None:
            return refused
        policy = policy_of(read.policy or {})
        direct = False
        for _ in range(2):
            answers: list[Accepted | EruError] = []
            placer = KnownPlacer(known, direct=direct)
            state = await decision.plan_batch(
                ctx, session, pod, read.snapshot, items, keys, read.existing, policy, placer, answers, read.waiting
            )
            if not placer.missing:
                break
            if locked:  # never held across the distributor's round trip
                await session.release()
                locked = False
            asked = time.perf_counter()
            agreed = await placer.confirm(ctx)
            distributor_seconds += time.perf_counter() - asked
            if agreed:
                break
            log.warning("deploy.batch_mispredicted", pod=pod, requests=len(items))
            direct = True  # decided again, each new ask put to the distributor alone (the lock is not held)
        if not locked:
            now = await read_pod(session, keys, needs, items, lock=True)
            locked = True
            if not read.stands_for(now):
                log.debug(
                    "deploy.batch_read_changed",
                    pod=pod,
                    policy=read.policy != now.policy,
                    existing=read.existing != now.existing,
                    waiting=read.waiting != now.waiting,
                    nodes=read.snapshot.nodes != now.snapshot.nodes,
                    counts=read.snapshot.counts != now.snapshot.counts,
                )
                read = now  # decided again under the lock, from the answers had
                continue
        state.distributor_seconds += distributor_seconds
        if ctx.publisher is not None:  # published from here right after the commit, not by the relay
            state.writes.hold_seconds = ctx.publisher.hold_seconds
        return state, answers, read
    raise Retryable(f"the pod changed under its batch {CONFIRM_ROUNDS} times in a row; retrying", delay=0.1)


def workloads_of(items: Sequence[Item]) -> frozenset[str]:
    """The workloads whose live counts the batch's decisions read."""
    return frozenset(req.workload.name for req, _, _ in items)


def keys_of(items: Sequence[Item]) -> list[str]:
    return [req.request_id or envelope.id for req, _, envelope in items]


def policy_of(policy_object: Mapping[str, Any]) -> PodPolicy:
    return parse_policy({k: v for k, v in policy_object.items() if k != "scorers"})


async def decide_ahead(ctx: Context, pod: str, items: Sequence[Item], basis: Basis) -> Ahead | None:
    """The batch decided against `basis` with the distributor's confirmation, or None when that cannot be had.
    `basis` is narrowed to what the batch reads under the lock (the live counts of its own workloads), so that it
    can be compared with that snapshot as a whole; the counts of workloads the previous batch did not read are read
    first, without the lock (that batch places none of them, so its commit cannot change them)."""
    try:
        policy = policy_of(basis.policy)
    except InvalidInput:
        return None
    workloads = workloads_of(items)
    snapshot = basis.snapshot
    uncounted = snapshot.uncounted(workloads)
    if uncounted:  # workloads the previous batch did not read: as committed now (the previous batch places none)
        snapshot = snapshot.with_counts(await ctx.store.live_counts(pod, uncounted))
    basis = Basis(basis.policy, snapshot.for_workloads(workloads))
    answers: list[Accepted | EruError] = []
    placer = PredictingPlacer()
    state = await decision.plan_batch(
        ctx, None, pod, basis.snapshot, items, keys_of(items), {}, policy, placer, answers
    )
    try:
        if await placer.confirm(ctx) is not None:
            return None
    except Retryable:
        return None  # decided again under the lock, where a missing distributor fails the batch as always
    return Ahead(basis, state, answers)
