"""A batch decided in process (docs/pipeline.md "The decision"): `PodPlan` holds the batch's snapshot (replaced by
its charged successor after each request), its writes and its parts; `plan_batch` decides every request in order
against it, `plan_one` one request (`eru.planning.decide`: stage, the placer's answer, conclude). Nothing here takes
the pod's lock or writes: `eru_allocator.deploy.confirm` decides when and against which read, and
`eru_allocator.deploy.pipeline` submits."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from eru.activity import ACTIVITY
from eru.bus import Envelope, new_envelope, new_id
from eru.bus.subjects import deploy_event
from eru.domain import Accepted, DeployEvent, DeployRequest, ErrorReply
from eru.errors import EruError, InvalidInput, PlanningFailure
from eru.planning import NodeResources, NormalizedRequest
from eru.planning.analysis_cache import AnalysisCache
from eru.planning.decide import NodeCache, conclude, stage
from eru.planning.decision_record import RecordBook, SnapshotChain
from eru.planning.plan import Rejection
from eru.planning.snapshot import ClusterSnapshot
from eru.podsecurity import PodPolicy
from eru.store.plans import Plan, PlanPart
from eru.store.protocol import (
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
from eru_allocator.delivery.settled import is_fresh_retry
from eru_allocator.deploy.context import Context, Item
from eru_allocator.deploy.creates import PlannedCommand, command_messages, create_containers
from eru_allocator.deploy.placing import DIRECT, Placer
from eru_allocator.deploy.requests import answer_for_existing, ask_of, refused_by_policy

log = structlog.get_logger()

AHEAD_YIELD_EVERY = 8  # requests planned ahead between two yields to the event loop (`plan_batch`)


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


async def plan_batch(
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
    # the capacity of the nodes placed on only; readers put back the others' from the input (docs/replay.md)
    writes.decisions.append(DecisionRow(decision_id, "deploy", problem, json.dumps(outcome.recorded_answer())))
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
