"""Deploy requests (docs/pipeline.md): validate, open the pod's store session (its lock and ONE transaction), take
the snapshot, decide each request of the batch (`eru.planning.decide`, the distributor between stage and conclude),
submit everything at once.

The idempotency key is the client's `request_id`, or the request message's envelope id (stable across redeliveries),
so a redelivery, a client retry or a replica that died between commit and ack finds the deploy already made and
answers with it; `deploys.request_id` is unique, so two replicas can never both commit one key (`Conflict` at
submit: the batch is retried and answered from what the other one made).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from eru import telemetry
from eru.activity import ACTIVITY
from eru.bus import Envelope, Retryable, new_envelope, new_id
from eru.bus.protocol import Bus
from eru.bus.subjects import deploy_event
from eru.colocation.backoff import KeepConfig
from eru.domain import Accepted, DeployEvent, DeployRequest, ErrorReply
from eru.errors import EruError, InvalidInput, PlanningFailure
from eru.planning import NodeResources, NormalizedRequest, PlanningConfig
from eru.planning.analysis_cache import AnalysisCache
from eru.planning.decide import NodeCache, conclude, stage
from eru.planning.decision_record import RecordBook, SnapshotChain
from eru.planning.plan import Rejection
from eru.planning.snapshot import ClusterSnapshot
from eru.podsecurity import PodPolicy, parse_policy
from eru.store.plans import Plan, PlanPart
from eru.store.protocol import (
    AllocatorStore,
    Conflict,
    DecisionRow,
    DecisionSnapshotRow,
    DeployRow,
    OutboxMessage,
    PodSession,
    PodWrites,
    SnapshotNeeds,
    Usage,
)
from eru_allocator.admission import waiting
from eru_allocator.delivery.dead_letter_gate import DeadLetterGate
from eru_allocator.delivery.publisher import CommittedPublisher
from eru_allocator.delivery.settled import is_fresh_retry
from eru_allocator.deploy import loop
from eru_allocator.deploy.creates import PlannedCommand, command_messages, create_containers
from eru_allocator.deploy.placing import DIRECT, AskKey, KnownPlacer, Placer, PredictingPlacer
from eru_allocator.deploy.placing import Answer as PlaceAnswer
from eru_allocator.deploy.plan_ahead import Ahead, Basis, PodLine, Turn, may_plan_ahead
from eru_allocator.deploy.requests import answer_for_existing, ask_of, refused_by_policy, validate
from eru_allocator.flow.batcher import Batcher, next_batch_may_start

log = structlog.get_logger()


@dataclass(frozen=True)
class Context:
    """What a deploy needs from the running service."""

    store: AllocatorStore
    bus: Bus
    config: PlanningConfig
    source: str
    place_timeout_seconds: float
    node_down_after_seconds: float
    keep: KeepConfig = field(default_factory=KeepConfig)  # eviction memory back-offs (docs/colocation.md)
    plan_ahead: bool = True  # plan a pod's next batch while the current one commits (eru_allocator.deploy.plan_ahead)
    line: PodLine = field(default_factory=PodLine)
    # every dead letter recorded before a batch looks its keys up (eru_allocator.delivery.dead_letter_gate);
    # None: no check
    dead_letters: DeadLetterGate | None = None
    # publishes a batch's outbox rows right after its commit (eru_allocator.delivery.publisher); None: the relays do
    publisher: CommittedPublisher | None = None
    # the recorded text of each node object the batches' snapshots held, reused while the node is unchanged
    # (eru.planning.decision_record.RecordBook; the node cache keeps unchanged nodes the same objects)
    node_texts: NodeCache = field(default_factory=dict)
    # node analyses kept across batches while a node is unchanged (docs/planning.md "Per-batch cost")
    analyses: AnalysisCache = field(default_factory=AnalysisCache)
    # per pod, the last full snapshot row this process committed: a batch stores only the nodes that differ from it
    chains: dict[str, SnapshotChain] = field(default_factory=dict)


Item = tuple[DeployRequest, NormalizedRequest, Envelope]
AHEAD_YIELD_EVERY = 8  # requests planned ahead between two yields to the event loop (`_plan_batch`)


async def deploy(
    ctx: Context, req: DeployRequest, envelope: Envelope, batcher: Batcher[Item, Accepted | EruError]
) -> Accepted | EruError:
    """Plan and commit one request; returns the answer for the client (an `EruError` is an error reply).

    Requests for one pod that arrive together are committed together (`commit_batch`). Raises `Retryable` when the
    distributor cannot be reached: nothing is committed and the request comes back.
    """
    try:
        normalized = validate(req, ctx.config)
    except InvalidInput as error:
        return error
    return await batcher.submit(req.pod, (req, normalized, envelope))


class PodPlan:
    """One pod's batch: its store session, the immutable snapshot the next request is decided against (replaced by
    its charged successor after each plan, docs/pipeline.md "The decision"), and everything to submit."""

    def __init__(
        self,
        session: PodSession | None,
        snapshot: ClusterSnapshot,
        node_texts: NodeCache | None = None,
        analyses: AnalysisCache | None = None,
        chain: SnapshotChain | None = None,
    ) -> None:
        self.session = session  # None while planning ahead (eru_allocator.deploy.plan_ahead: no request of it waits)
        self.snapshot = snapshot
        self.writes = PodWrites()
        # the batch's snapshot stored once (docs/replay.md); unchanged nodes' texts reused from earlier batches
        self.records = RecordBook(new_id(), snapshot.nodes, node_texts, chain, time.monotonic())
        # node analyses reused while a node is unchanged (same decisions, less CPU), a process's across its batches
        self.analyses = analyses if analyses is not None else AnalysisCache()
        self.distributor_seconds = 0.0
        self.placer: Placer = DIRECT
        self.commands: dict[str, list[PlannedCommand]] = {}  # node → the batch's creates there, one message at submit
        # each request's share (eru.store.plans.PlanPart): its rows' spans, what it charges and creates per node
        self.parts: list[PlanPart] = []
        self.part_usage: dict[str, list[Usage]] = {}
        self.part_commands: dict[str, list[PlannedCommand]] = {}
        self.waiting: bool | None = None  # whether requests of the pod wait, as the batch's read found (None: ask)

    def marks(self) -> tuple[int, int, int, int, int]:
        """Where the next request's rows start: decisions, deploys, containers, messages, waits."""
        w = self.writes
        return len(w.decisions), len(w.deploys), len(w.containers), len(w.messages), len(w.waits)

    def close_part(self, start: tuple[int, int, int, int, int]) -> None:
        """The request whose rows began at `start` is decided: its `PlanPart`."""
        end = self.marks()
        usage = {name: tuple(usages) for name, usages in self.part_usage.items()}
        commands = {name: tuple(planned) for name, planned in self.part_commands.items()}
        self.parts.append(
            PlanPart(
                decisions=(start[0], end[0]),
                deploys=(start[1], end[1]),
                containers=(start[2], end[2]),
                messages=(start[3], end[3]),
                waits=(start[4], end[4]),
                usage=usage,
                commands=commands,
            )
        )
        self.part_usage, self.part_commands = {}, {}

    def plan(self, pod: str, needs: SnapshotNeeds) -> Plan:
        """The batch as a `Plan` for `submit_plan` (its writes finished: `finish`)."""
        return Plan(pod, self.finish(), tuple(self.parts), needs, command_messages)

    def finish(self) -> PodWrites:
        """The writes to submit: with one command message per node for every container the batch creates."""
        self.writes.messages += command_messages(self.commands)
        self.commands = {}
        nodes = self.records.snapshot()
        if nodes is not None and not self.writes.decision_snapshots:
            self.writes.decision_snapshots.append(DecisionSnapshotRow(self.records.snapshot_id, nodes))
        return self.writes

    @property
    def nodes(self) -> tuple[NodeResources, ...]:
        """The snapshot's schedulable nodes as they stand after the requests planned so far."""
        return self.snapshot.nodes


async def commit_batch(ctx: Context, pod: Hashable, items: Sequence[Item]) -> list[Accepted | EruError]:
    """Plan every request of the batch in arrival order, each against the pod as the previous ones left it, and
    submit them all in ONE transaction under the pod lock. While the previous batch of the pod commits, this one is
    planned ahead against the state that batch leaves (eru_allocator.deploy.plan_ahead)."""
    pod_name = str(pod)
    previous, turn = ctx.line.join(pod_name)
    try:
        return await _commit(ctx, pod_name, items, previous, turn)
    finally:
        ctx.line.leave(pod_name, turn)


async def _commit(
    ctx: Context, pod_name: str, items: Sequence[Item], previous: Turn | None, turn: Turn
) -> list[Accepted | EruError]:
    answers: list[Accepted | EruError] = []
    started = time.perf_counter()
    ahead: Ahead | None = None
    # asked while the previous batch commits; answered before this one looks its keys up (a replayed dead letter)
    recorded = asyncio.ensure_future(ctx.dead_letters.wait()) if ctx.dead_letters is not None else None
    try:
        if previous is not None:
            basis = await previous.planned
            if basis is not None and ctx.plan_ahead and may_plan_ahead(items):
                ahead = await _decide_ahead(ctx, pod_name, items, basis)
            await previous.done
        if recorded is not None:
            await recorded
    finally:
        if recorded is not None and not recorded.done():
            recorded.cancel()
    try:
        async with ctx.store.deploy_batch(pod_name) as session:  # locked by open_batch, its first statement
            keys = _keys(items)
            needs = SnapshotNeeds(
                ctx.config,
                ctx.node_down_after_seconds,
                score=any(req.mode == "score" for req, _, _ in items),
                batch=any(normalized.batch for _, normalized, _ in items),
                keep=ctx.keep,
                workloads=_workloads(items),
                labels=any(req.node_filter is not None for req, _, _ in items),
            )
            # decided ahead: read under the lock, to be compared; else read without it, decided and confirmed by
            # the distributor, then compared with the pod read under the lock (`_decide`)
            read = await _read(session, keys, needs, items, lock=ahead is not None)
            refused = await _refused(session, pod_name, read, items)
            if refused is not None:
                return refused
            if ahead is not None and ahead.holds(read.policy or {}, read.existing, read.snapshot):
                state, answers = ahead.state, ahead.answers  # decided against exactly this state
                ctx.line.ahead_used += 1
                if ctx.publisher is not None:  # published from here right after the commit, not by the relay
                    state.writes.hold_seconds = ctx.publisher.hold_seconds
            else:
                if ahead is not None:
                    ctx.line.ahead_missed += 1
                made = await _decide(ctx, session, pod_name, read, items, needs, locked=ahead is not None)
                if isinstance(made, list):
                    return made
                state, answers, read = made
            planned = time.perf_counter()
            turn.plan_known(Basis(read.policy or {}, state.snapshot))  # the next batch may plan against it now
            next_batch_may_start()

            async def replan(refreshed: ClusterSnapshot, indexes: tuple[int, ...]) -> loop.Decided:
                again = [items[index] for index in indexes]
                waits = await session.has_waiting() if _may_wait(again) else None
                basis = Read(read.policy, {}, refreshed, waits)
                redecided = await _decide(ctx, session, pod_name, basis, again, needs, locked=True)
                if isinstance(redecided, list):  # the pod went or its policy became invalid meanwhile
                    raise Retryable("the pod changed while its batch was submitted; retrying", delay=0.1)
                decision, replies, _ = redecided
                return loop.Decided(decision, replies, indexes)

            decided = loop.Decided(state, answers, tuple(range(len(items))))
            done = await loop.submit_until_placed(session, pod_name, needs, decided, replan, keys)
            answers = done.answers
        if done.first_committed:  # its snapshot row is written: a full one may serve as the next batches' base
            state.records.stored()
        if ctx.publisher is not None:  # before the answers: a client that acts on its reply finds the commands sent
            for written in done.written:
                if written.hold_seconds is not None:
                    await ctx.publisher.publish(written.messages, {row.id: row.tenant for row in written.deploys})
        placed = sum(len(written.containers) for written in done.written)
        telemetry.ALLOCATIONS.labels(pod_name).inc(placed)  # counted once committed
        log.debug(
            "deploy.batch",
            pod=pod_name,
            requests=len(items),
            ahead=ahead is not None and state is ahead.state,
            rounds=done.rounds,
            plan_seconds=round(planned - started, 4),
            distributor_seconds=round(state.distributor_seconds, 4),
            total_seconds=round(time.perf_counter() - started, 4),
        )
    except Conflict:
        # a key committed meanwhile by another replica (another pod's lock): the retry answers with what it made
        raise Retryable("a request id of this batch was committed concurrently; retrying", delay=0.1) from None
    return answers


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


async def _read(
    session: PodSession, keys: Sequence[str], needs: SnapshotNeeds, items: Sequence[Item], *, lock: bool
) -> Read:
    """The pod as the batch reads it: `open_batch` (which takes the lock) or `peek_batch` (which does not)."""
    policy, existing, snapshot = await (session.open_batch if lock else session.peek_batch)(keys, needs)
    waits = await session.has_waiting(lock=lock) if policy is not None and _may_wait(items) else None
    return Read(policy, existing, snapshot, waits)


def _may_wait(items: Sequence[Item]) -> bool:
    return any(req.wait_seconds > 0 for req, _, _ in items)


async def _refused(
    session: PodSession, pod: str, read: Read, items: Sequence[Item]
) -> list[Accepted | EruError] | None:
    """Every request's answer when the pod is unknown or its policy invalid, else None."""
    if read.policy is None:
        known = await session.pod_names(20)
        error: EruError = InvalidInput("pod", f"unknown pod {pod!r} (known: {', '.join(known) or 'none'})")
        return [error for _ in items]
    try:
        # the pod's policy object: security keys (eru.podsecurity) plus the score mode's `scorers` weights
        _policy_of(read.policy)
    except InvalidInput as invalid:
        return [invalid for _ in items]
    return None


async def _decide(
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
    keys = _keys(items)
    known: dict[AskKey, PlaceAnswer] = {}
    distributor_seconds = 0.0
    for _ in range(CONFIRM_ROUNDS):
        refused = await _refused(session, pod, read, items)
        if refused is not None:
            return refused
        policy = _policy_of(read.policy or {})
        direct = False
        for _ in range(2):
            answers: list[Accepted | EruError] = []
            placer = KnownPlacer(known, direct=direct)
            state = await _plan_batch(
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
            now = await _read(session, keys, needs, items, lock=True)
            locked = True
            if not read.stands_for(now):
                read = now  # decided again under the lock, from the answers had
                continue
        state.distributor_seconds += distributor_seconds
        if ctx.publisher is not None:  # published from here right after the commit, not by the relay
            state.writes.hold_seconds = ctx.publisher.hold_seconds
        return state, answers, read
    raise Retryable(f"the pod changed under its batch {CONFIRM_ROUNDS} times in a row; retrying", delay=0.1)


def _workloads(items: Sequence[Item]) -> frozenset[str]:
    """The workloads whose live counts the batch's decisions read."""
    return frozenset(req.workload.name for req, _, _ in items)


def _keys(items: Sequence[Item]) -> list[str]:
    return [req.request_id or envelope.id for req, _, envelope in items]


def _policy_of(policy_object: Mapping[str, Any]) -> PodPolicy:
    return parse_policy({k: v for k, v in policy_object.items() if k != "scorers"})


async def _decide_ahead(ctx: Context, pod: str, items: Sequence[Item], basis: Basis) -> Ahead | None:
    """The batch decided against `basis` with the distributor's confirmation, or None when that cannot be had.
    `basis` is narrowed to what the batch reads under the lock (the live counts of its own workloads), so that it
    can be compared with that snapshot as a whole; the counts of workloads the previous batch did not read are read
    first, without the lock (that batch places none of them, so its commit cannot change them)."""
    try:
        policy = _policy_of(basis.policy)
    except InvalidInput:
        return None
    workloads = _workloads(items)
    snapshot = basis.snapshot
    uncounted = snapshot.uncounted(workloads)
    if uncounted:  # workloads the previous batch did not read: as committed now (the previous batch places none)
        snapshot = snapshot.with_counts(await ctx.store.live_counts(pod, uncounted))
    basis = Basis(basis.policy, snapshot.for_workloads(workloads))
    answers: list[Accepted | EruError] = []
    placer = PredictingPlacer()
    state = await _plan_batch(ctx, None, pod, basis.snapshot, items, _keys(items), {}, policy, placer, answers)
    try:
        if await placer.confirm(ctx) is not None:
            return None
    except Retryable:
        return None  # decided again under the lock, where a missing distributor fails the batch as always
    return Ahead(basis, state, answers)


async def _plan_batch(
    ctx: Context,
    session: PodSession | None,
    pod: str,
    snapshot: ClusterSnapshot,
    items: Sequence[Item],
    keys: list[str],
    existing: Mapping[str, Any],
    policy: PodPolicy,
    placer: Placer,
    answers: list[Accepted | EruError],
    waits: bool | None = None,
) -> PodPlan:
    """Every request decided in order against `snapshot` (nothing submitted yet); the answers are appended to
    `answers`. `waits`: whether requests of the pod wait, as read with the snapshot (None: asked of the session)."""
    state = PodPlan(session, snapshot, ctx.node_texts, ctx.analyses, ctx.chains.setdefault(pod, SnapshotChain()))
    state.placer = placer
    state.waiting = waits
    made: dict[str, Accepted | EruError] = {}
    for index, ((req, normalized, envelope), key) in enumerate(zip(items, keys, strict=True)):
        if session is None and index and not index % AHEAD_YIELD_EVERY:
            # planned ahead, the previous batch holds the pod's lock: let its round trips' answers through (one
            # event loop serves both; ~0.3 ms of planning per request would hold them for the whole batch)
            await asyncio.sleep(0)
        start = state.marks()
        if key in existing and not is_fresh_retry(existing[key], envelope):
            found = existing[key]
            answers.append(answer_for_existing(found.id, found.status, found.result, key))
        elif (refusal := refused_by_policy(req, policy, pod)) is not None:
            answers.append(refusal)
        elif key in made:
            answers.append(made[key])
        else:
            made[key] = await _admit_and_plan(ctx, state, req, normalized, envelope, key)
            answers.append(made[key])
        state.close_part(start)
    return state


async def _admit_and_plan(
    ctx: Context, state: PodPlan, req: DeployRequest, normalized: NormalizedRequest, envelope: Envelope, key: str
) -> Accepted | EruError:
    """What `waiting.admit` says of the request, acted on: planned now (and waiting instead when it does not fit
    and may wait), or the answer admission already recorded (queued, refused)."""
    admission = await waiting.admit(ctx, state, req, normalized, envelope, key)
    if not isinstance(admission, waiting.PlanIt):
        return admission
    start = waiting.marks(state.writes)
    answer = await plan_one(ctx, state, req, normalized, envelope, key)
    return waiting.wait_instead(state.writes, start, req, envelope, key, answer) if admission.may_wait else answer


async def plan_one(
    ctx: Context,
    state: PodPlan,
    req: DeployRequest,
    normalized: NormalizedRequest,
    envelope: Envelope,
    key: str,
    deploy_id: str | None = None,
) -> Accepted | EruError:
    """Decide one request against the batch's snapshot (`eru.planning.decide`: stage, the distributor's placement,
    conclude) and queue its records; the snapshot is replaced by its charged successor. `deploy_id` is given when a
    waiting request is admitted (deploy/admission_pass.py)."""
    deploy_id = deploy_id or new_id()
    decision_id = new_id()
    ask = ask_of(req, normalized)
    writes = state.writes
    try:  # malformed options (an unknown scorer, bad weights) or placements: this request fails alone
        staged = stage(state.snapshot, ask, state.analyses)
        problem = state.records.record(staged)
        placed: Mapping[str, int] | PlanningFailure = {}
        if staged.nodes:
            asked = time.perf_counter()
            try:
                placed = await state.placer.place(ctx, req, staged.columns(), envelope, dict(staged.options))
            except PlanningFailure as refused:
                placed = refused
            finally:
                state.distributor_seconds += time.perf_counter() - asked
        outcome = conclude(staged, placed)
    except InvalidInput as invalid:
        ACTIVITY.count("deploy.invalid")
        log.debug("deploy.invalid", pod=req.pod, field=invalid.details.get("field"), reason=invalid.message)
        return invalid
    if isinstance(outcome, Rejection):
        failure = outcome.failure
        writes.decisions.append(DecisionRow(decision_id, "deploy", problem, json.dumps(outcome.answer())))
        error = ErrorReply(code=failure.code, message=failure.message, details=_plain(failure.details))
        result = {"rejected": True, "decision_id": decision_id, "error": error.model_dump(mode="json")}
        writes.deploys.append(
            DeployRow(deploy_id, key, req.pod, req.workload.tenant, "failed", req.model_dump_json(), json.dumps(result))
        )
        failed = DeployEvent(deploy_id=deploy_id, kind="failed", error=error, decision_id=decision_id)
        writes.messages.append(
            OutboxMessage(
                deploy_event(deploy_id, "failed"), failed, _event_envelope(ctx, "failed", deploy_id, envelope)
            )
        )
        ACTIVITY.count(f"deploy.failed.{failure.code}")
        log.debug("deploy.failed", deploy_id=deploy_id, pod=req.pod, code=failure.code, reason=failure.message)
        return PlanningFailure(failure.message, code=failure.code, deploy_id=deploy_id, **failure.details)
    placements = dict(outcome.placements)
    plans = list(outcome.containers)
    writes.decisions.append(DecisionRow(decision_id, "deploy", problem, json.dumps(outcome.answer())))
    status = "planned" if plans else "completed"
    writes.deploys.append(
        DeployRow(
            deploy_id,
            key,
            req.pod,
            req.workload.tenant,
            status,
            req.model_dump_json(),
            json.dumps({"placements": placements, "decision_id": decision_id}),
        )
    )
    creates = create_containers(req, normalized, plans, deploy_id, ctx.config, ctx.source, envelope)
    writes.containers += creates.rows
    for node, commands in creates.commands.items():
        state.commands.setdefault(node, []).extend(commands)
        state.part_commands.setdefault(node, []).extend(commands)
    for node, usage in creates.usage.items():
        writes.usage.setdefault(node, []).extend(usage)
        state.part_usage.setdefault(node, []).extend(usage)
    planned = DeployEvent(deploy_id=deploy_id, kind="planned", placements=placements, decision_id=decision_id)
    writes.messages.append(
        OutboxMessage(deploy_event(deploy_id, "planned"), planned, _event_envelope(ctx, "planned", deploy_id, envelope))
    )
    if not plans:
        done = DeployEvent(deploy_id=deploy_id, kind="completed", decision_id=decision_id)
        writes.messages.append(
            OutboxMessage(
                deploy_event(deploy_id, "completed"), done, _event_envelope(ctx, "completed", deploy_id, envelope)
            )
        )
    state.snapshot = state.snapshot.charged(ask, outcome.containers, outcome.placements)  # the next request sees it
    # publish → planned, on the sender's clock (a skewed clock is clamped to 0 by the summary)
    ACTIVITY.count("deploy.planned", seconds=time.time() - envelope.time.timestamp())
    log.debug("deploy.planned", deploy_id=deploy_id, pod=req.pod, placements=placements)
    return Accepted(deploy_id=deploy_id)


def _event_envelope(ctx: Context, kind: str, deploy_id: str, cause: Envelope) -> Envelope:
    return new_envelope(f"eru.deploy.{kind}", ctx.source, correlation_id=deploy_id, causation=cause)


def _plain(details: dict[str, Any]) -> dict[str, Any]:
    plain: dict[str, Any] = json.loads(json.dumps(details, default=str))
    return plain
