"""Admitting waiting deploy requests in hierarchical DRF order (docs/fairness-and-scoring.md), across allocator
replicas.

The queue lives in PostgreSQL (`deploy_waits`, migration 0003), so every replica sees it. A pass over one pod runs in
one transaction under the pod's advisory lock (the same lock deploys take), so whichever replica runs it decides
alone and against the current record:

1. waits whose deadline passed end: the deploy fails with code `wait_expired`, naming `wait_seconds` and the last
   reason it waited;
2. `solve_admission` (pure, `eru.fairness`) orders the rest over the pod's snapshot: totals and free resources of its
   schedulable nodes, each tenant's weight, quota, limit and held resources; its JSON input and output are stored as
   an `admission` decision when it admits or rejects something, so `eru replay` re-runs it;
3. the admitted requests are planned in that order exactly as a fresh request is (distributor, concrete plans,
   records); one that still finds no room (fragmentation: the admission check is per pod, placement per node) keeps
   waiting, and the pass repeats with the others until nothing more goes;
4. requests rejected for good (demand alone over the tenant's limit, e.g. after a limit was lowered) fail with
   `tenant_limit`.

Passes are woken by `NOTIFY eru_admission` (triggers fire when a container gives resources back or a node appears,
grows or is uncordoned in a pod with waiting requests; a new waiting request and `tenant-set` notify too), and by a
timer at the next deadline (at most every `poll_seconds`) as a safety net. Replicas may run a pass for the same pod
one after the other; the second finds nothing new to do.

The pass speaks only the store's verbs (`eru.store.waits`: the pod session's waits and tenants, the store's queue and
its wakes), so it runs on PostgreSQL and on the in-memory store alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from eru.activity import ACTIVITY
from eru.bus import Envelope, new_envelope, new_id
from eru.bus.subjects import deploy_event
from eru.domain import DeployEvent, DeployRequest, ErrorReply
from eru.errors import EruError, PlanningFailure
from eru.fairness.admission_json import solve_admission
from eru.fairness.ledger import parent_of
from eru.store.protocol import AllocatorStore, DecisionRow, OutboxMessage, PodSession, SnapshotNeeds
from eru.store.waits import AdmissionQueue, PendingWait
from eru_allocator.admission import accounting, reservations
from eru_allocator.admission.waiting import (
    admission_problem,
    in_batch_usage,
    limit_failure,
    most_instances,
    pending_request,
)
from eru_allocator.deploy import decision, requests
from eru_allocator.deploy.context import Context
from eru_allocator.store import batch_allowance

log = structlog.get_logger()

MAX_ROUNDS = 8


def _loads(value: str) -> Any:
    return json.loads(value)


class _Pass:
    """One pod's admission pass inside its transaction."""

    def __init__(self, ctx: Context, session: PodSession, state: decision.PodPlan) -> None:
        self.ctx = ctx
        self.session = session
        self.pod = session.pod
        self.state = state
        self.admitted = 0
        self.ended = 0

    def _event(self, deploy_id: str, kind: str, error: ErrorReply, cause: Envelope | None) -> None:
        event = DeployEvent(deploy_id=deploy_id, kind="failed", error=error)
        envelope = new_envelope(f"eru.deploy.{kind}", self.ctx.source, correlation_id=deploy_id, causation=cause)
        self.state.writes.messages.append(OutboxMessage(deploy_event(deploy_id, kind), event, envelope))

    async def end(self, row: PendingWait, error: ErrorReply, decision_id: str | None = None) -> None:
        """The waiting deploy fails: record, event, queue row gone."""
        result = {"error": error.model_dump(mode="json"), **({"decision_id": decision_id} if decision_id else {})}
        await self.session.fail_wait(row.deploy_id, json.dumps(result))
        self._event(row.deploy_id, "failed", error, _envelope(row))
        self.ended += 1
        ACTIVITY.count("deploy.wait_ended")
        log.debug("deploy.wait_ended", deploy_id=row.deploy_id, code=error.code, reason=error.message)

    async def expire(self, row: PendingWait) -> None:
        request = _loads(row.request)
        wait = float(request.get("wait_seconds", 0))
        reason = _loads(row.reason) or {}
        message = f"not admitted within wait_seconds={wait:g}"
        if reason.get("message"):
            message += f" (last reason: {reason['message']})"
        await self.end(row, ErrorReply(code="wait_expired", message=message, details={"wait_seconds": wait, **reason}))

    async def admit(self, row: PendingWait) -> bool:
        """Plan one admitted request as a fresh one would be; False (still waiting) when it finds no room."""
        req = DeployRequest.model_validate_json(row.request)
        try:
            normalized = requests.validate(req, self.ctx.config)
        except EruError as error:  # config changed since it arrived (max_deploy_count): it can never go
            await self.end(row, ErrorReply(code=error.code, message=error.message, details=_plain(error.details)))
            return False
        writes = self.state.writes
        marks = (len(writes.deploys), len(writes.messages))
        answer = await decision.plan_one(
            self.ctx, self.state, req, normalized, _envelope(row), row.request_key, deploy_id=row.deploy_id
        )
        if isinstance(answer, PlanningFailure):
            del writes.deploys[marks[0] :]
            del writes.messages[marks[1] :]
            reason = {"code": answer.code, "message": answer.message}
            await self.session.set_wait_reason(row.deploy_id, json.dumps(reason))
            return False
        (record,) = [entry for entry in writes.deploys[marks[0] :] if entry.id == row.deploy_id]
        writes.deploys.remove(record)
        # the deploy row exists (status waiting): it becomes planned (or completed) with the placement's result
        await self.session.admit_wait(row.deploy_id, record.status, record.result)
        self.admitted += 1
        return True

    async def decide(self, rows: list[PendingWait], tried: set[str]) -> tuple[list[PendingWait], list[PendingWait]]:
        """One DRF admission decision over the waiting `rows` not yet `tried`: (admitted rows in order, rejected)."""
        config = self.ctx.config
        tenants = await self.session.tenants()
        usage = await self.session.tenant_usage(config)
        in_batch_usage(self.state.writes.containers, usage, config)
        totals, free = accounting.pod_totals(self.state.nodes, config)
        pending = []
        by_id = {}
        for row in rows:
            if row.deploy_id in tried:
                continue
            if row.tenant not in tenants or parent_of(row.tenant) not in tenants:
                await self.end(row, ErrorReply(code="invalid_input", message=f"tenant {row.tenant!r} was removed"))
                continue
            req = DeployRequest.model_validate_json(row.request)
            try:
                normalized = requests.validate(req, config)
            except EruError as error:
                await self.end(row, ErrorReply(code=error.code, message=error.message, details=_plain(error.details)))
                continue
            instances = most_instances(req, len(self.state.nodes))
            entry = pending_request(row.deploy_id, row.tenant, normalized, instances, row.arrival, config)
            pending.append(entry)
            by_id[row.deploy_id] = row
        if not pending:
            return [], []
        snapshot = self.state.snapshot
        reserved, reserved_used = reservations.tenant_totals(snapshot.reservations, snapshot.held, config)
        problem = admission_problem(
            tenants, usage, totals, free, pending, reserved=reserved, reserved_used=reserved_used
        )
        output = solve_admission(problem)
        decision_id = new_id()
        if output["admitted"] or output["rejected"]:
            # a decision that changes something is recorded; one that leaves everyone waiting (every timer tick
            # while nothing frees) only updates the reasons
            self.state.writes.decisions.append(
                DecisionRow(decision_id, "admission", json.dumps(problem), json.dumps(output))
            )
        for verdict in output["waiting"]:
            reason = {"code": verdict["code"], "message": verdict["message"], "details": verdict["details"]}
            await self.session.set_wait_reason(verdict["id"], json.dumps(reason))
        rejected = []
        for verdict in output["rejected"]:
            if verdict["code"] == "over_limit":
                row = by_id[verdict["id"]]
                failure = limit_failure(tenants[parent_of(row.tenant)], verdict)
                refusal = ErrorReply(code=failure.code, message=failure.message, details=_plain(failure.details))
                await self.end(row, refusal, decision_id)
                rejected.append(row)
            # over_totals: the pod is smaller than the request right now (nodes down?): it keeps waiting
        return [by_id[i] for i in output["admitted"]], rejected


async def admit_pod(ctx: Context, store: AllocatorStore, pod: str) -> tuple[int, int]:
    """One admission pass over `pod` (see the module doc); returns (admitted, ended)."""
    async with store.pod(pod) as session:
        rows = await session.pod_waits()
        if not rows:
            return 0, 0
        asked = [_request(row) for row in rows]
        needs = SnapshotNeeds(
            ctx.config,
            ctx.node_down_after_seconds,
            score=any(request.get("mode") == "score" for request in asked),
            batch=any(batch_allowance.is_batch(request) for request in asked),
            keep=ctx.keep,
            labels=any(request.get("node_filter") for request in asked),
        )
        state = decision.PodPlan(session, await session.snapshot(needs), ctx.node_texts)
        work = _Pass(ctx, session, state)
        live = []
        for row in rows:
            if row.expired:
                await work.expire(row)
            else:
                live.append(row)
        tried: set[str] = set()
        for _ in range(MAX_ROUNDS):
            admitted, rejected = await work.decide(live, tried)
            gone = {row.deploy_id for row in rejected}
            progress = False
            for row in admitted:
                tried.add(row.deploy_id)
                if await work.admit(row):
                    gone.add(row.deploy_id)
                    progress = True
            live = [row for row in live if row.deploy_id not in gone]
            if not progress:
                break
        await session.submit(state.finish())
    if work.admitted or work.ended:
        ACTIVITY.count("admission.admitted", work.admitted)
        ACTIVITY.count("admission.ended", work.ended)
        log.debug("admission.pass", pod=pod, admitted=work.admitted, ended=work.ended)
    return work.admitted, work.ended


async def run_admission(
    ctx: Context,
    store: AllocatorStore,
    queue: AdmissionQueue,
    stopping: asyncio.Event,
    *,
    poll_seconds: float = 5.0,
    owns: Callable[[str], bool] | None = None,
) -> None:
    """Run admission passes on `store` for every pod with waiting requests whenever capacity may have freed (`queue`
    says which pods and when), until stopped; with `owns`, only for the pods whose partition this replica leases
    (docs/replicas.md)."""
    wake = asyncio.Event()

    def on_notify(_pod: str) -> None:
        wake.set()

    async with queue.listen_admission(on_notify):
        while not stopping.is_set():
            wake.clear()
            timeout = poll_seconds
            try:
                for pod in await queue.waiting_pods():
                    if owns is None or owns(pod):
                        await admit_pod(ctx, store, pod)
                left = await queue.next_deadline()
                if left is not None:
                    timeout = min(poll_seconds, max(left, 0.02))
            except Exception as error:  # e.g. no distributor: the pass rolled back and runs again
                log.warning("admission.pass_failed", error=f"{type(error).__name__}: {error}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_either(wake, stopping), timeout)


async def _either(first: asyncio.Event, second: asyncio.Event) -> None:
    waits = [asyncio.ensure_future(first.wait()), asyncio.ensure_future(second.wait())]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waits:
            task.cancel()


def _request(row: PendingWait) -> Mapping[str, Any]:
    request = _loads(row.request)
    return request if isinstance(request, dict) else {}


def _envelope(row: PendingWait) -> Envelope:
    return Envelope.from_headers(_loads(row.envelope))


def _plain(details: dict[str, Any]) -> dict[str, Any]:
    plain: dict[str, Any] = json.loads(json.dumps(details, default=str))
    return plain
