"""A deploy request meets its tenant (docs/fairness-and-scoring.md): limit enforcement, and waiting for capacity instead
of failing.

`admit` runs inside the batch's store session, under the pod lock, before a request is planned; it only decides
(plan it now, queue it, refuse it) and the deploy loop acts on what it returns:

* an unknown tenant is refused (`workload.tenant`);
* a tenant without a limit and a request without `wait_seconds` go straight to planning (Eru's fail-at-once);
* over the limit: refused with code `tenant_limit` and the numbers (nothing allocated) — unless the request may
  wait and its demand alone is within the limit, then it waits for its tenant's own containers to go;
* a request that may wait joins the queue when its pod already has waiting requests (it must not overtake them:
  admission is in DRF order, `deploy/admission_pass.py`), and when planning finds no room.

A waiting request has a `deploys` row with status `waiting` and a `deploy_waits` row; the client is answered
`accepted` with its deploy id and follows the deploy's events (planned … or failed with code `wait_expired`).
Every limit check is recorded as an `admission` decision whose input `eru.fairness.admission_json.solve_admission`
replays.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol

import structlog

from eru.activity import ACTIVITY
from eru.bus import Envelope, new_envelope, new_id
from eru.bus.subjects import deploy_event
from eru.domain import Accepted, DeployEvent, DeployRequest, ErrorReply
from eru.errors import EruError, InvalidInput, PlanningFailure
from eru.fairness import Tenant, TenantUsage
from eru.fairness.admission_json import solve_admission
from eru.fairness.ledger import is_group, parent_of
from eru.fairness.quantities import json_number, json_resources
from eru.planning import NormalizedRequest, PlanningConfig
from eru.planning.snapshot import ClusterSnapshot
from eru.store.protocol import ContainerRow, DecisionRow, DeployRow, OutboxMessage, PodSession, PodWrites, WaitRow
from eru_allocator.admission import accounting, reservations

log = structlog.get_logger()

MAX_WAIT_SECONDS = 7 * 86400.0
"""The longest a request may wait: the deploy stream keeps its events a week (a client must be able to follow it)."""


class Deciding(Protocol):
    """What a waiting check reads of the deploy path's context (`deploy.context.Context`)."""

    @property
    def config(self) -> PlanningConfig: ...

    @property
    def source(self) -> str: ...


class Batch(Protocol):
    """What a waiting check reads of the pod's batch (`deploy.decision.PodPlan`): its session (None while planned
    ahead), the snapshot the request is decided against, and the writes to submit."""

    @property
    def session(self) -> PodSession | None: ...

    @property
    def snapshot(self) -> ClusterSnapshot: ...

    @property
    def writes(self) -> PodWrites: ...

    @property
    def waiting(self) -> bool | None:
        """Whether requests of the pod waited for admission as the batch's read found (None: not read with it)."""
        ...


@dataclass(frozen=True, slots=True)
class PlanIt:
    """`admit`'s outcome for a request that is decided now: the caller plans it (`deploy.decision.plan_one`) and,
    when it does not fit and `may_wait`, hands the refusal to `wait_instead` (it waits for room instead)."""

    may_wait: bool


Admission = PlanIt | Accepted | EruError
"""What `admit` says: plan it now, or the answer already recorded in the batch's writes (queued: `Accepted`;
refused: an `EruError`)."""


def admission_problem(
    tenants: Mapping[str, Tenant],
    usage: Mapping[str, TenantUsage],
    totals: Mapping[str, Fraction],
    free: Mapping[str, Fraction],
    pending: Sequence[Mapping[str, Any]],
    *,
    reserved: Mapping[str, Mapping[str, Fraction]] | None = None,
    reserved_used: Mapping[str, Mapping[str, Fraction]] | None = None,
) -> dict[str, Any]:
    """The `solve_admission` input (JSON) for `pending` requests: their leaves and tenants, every tenant with a quota
    (its guarantee is held as headroom) or a reservation, and the groups of those tenants that hold something (a
    tenant's allocation is its groups' sum), each with its usage."""
    reserved = reserved or {}
    reserved_used = reserved_used or {}
    leaves = [str(p["tenant"]) for p in pending]
    tops = {parent_of(name) for name in leaves} | set(reserved)
    tops |= {name for name, tenant in tenants.items() if not is_group(name) and tenant.quota}
    names = set(leaves) | tops
    names |= {name for name in usage if parent_of(name) in tops and name in tenants}
    rows = []
    for name in sorted(names, key=lambda n: (parent_of(n), is_group(n), n)):
        if name not in tenants:
            continue
        tenant, held = tenants[name], usage.get(name, TenantUsage())
        row: dict[str, Any] = {
            "name": name,
            "weight": json_number(tenant.weight),
            "quota": json_resources(tenant.quota),
            "limit": json_resources(tenant.limit),
            "allocated": json_resources(held.allocated),
            "allocations": held.allocations,
        }
        if reserved.get(name):
            row["reserved"] = json_resources(reserved[name])
            row["reserved_used"] = json_resources(reserved_used.get(name, {}))
        rows.append(row)
    return {
        "kind": "admission",
        "totals": json_resources(totals),
        "free": json_resources(free),
        "tenants": rows,
        "pending": list(pending),
    }


def pending_entry(
    deploy_id: str,
    tenant: str,
    demand: Mapping[str, Fraction],
    count: int,
    arrival: int,
    reserves: Mapping[str, Fraction] | None = None,
) -> dict[str, Any]:
    """One pending request in a `solve_admission` problem: `demand` is what its tenant is charged (requested CPU),
    `reserves` what it takes from the pod's free resources (bound cores; left out when equal to `demand`)."""
    entry: dict[str, Any] = {
        "id": deploy_id,
        "tenant": tenant,
        "demand": json_resources(demand),
        "instances": count,
        "arrival": arrival,
    }
    if reserves is not None and dict(reserves) != dict(demand):
        entry["reserves"] = json_resources(reserves)
    return entry


def pending_request(
    deploy_id: str, tenant: str, normalized: NormalizedRequest, count: int, arrival: int, config: PlanningConfig
) -> dict[str, Any]:
    """The pending entry of a deploy request of `count` instances (`pending_entry`)."""
    demand = accounting.request_demand(normalized, count, config)
    reserves = accounting.request_reserves(normalized, count, config)
    return pending_entry(deploy_id, tenant, demand, count, arrival, reserves)


def most_instances(req: DeployRequest, nodes: int) -> int:
    """The most instances the request can make: `count`, or for modes `each` and `fill` (count per node) `count` on
    every schedulable node — the bound its tenant's limit is checked against, before placement."""
    return req.count * nodes if req.mode in ("each", "fill") else req.count


def in_batch_usage(rows: Sequence[ContainerRow], usage: dict[str, TenantUsage], config: PlanningConfig) -> None:
    """Add the containers planned earlier in this batch (not written yet) to `usage`."""
    for row in rows:
        accounting.add_held(usage, row.tenant, row.resources, 1, config)


async def admit(
    ctx: Deciding,
    state: Batch,
    req: DeployRequest,
    normalized: NormalizedRequest,
    envelope: Envelope,
    key: str,
) -> Admission:
    """Check the request against its tenant and the pod's queue (see the module doc): `PlanIt`, or the request
    queued or refused, its records already in `state.writes`. `state` is the batch (`deploy.decision.PodPlan`: its
    session, snapshot and writes). Decides only: the caller plans, so waiting is an outcome, not a callback."""
    if req.wait_seconds > MAX_WAIT_SECONDS:
        return InvalidInput("wait_seconds", f"{req.wait_seconds:g} is above the longest wait, {MAX_WAIT_SECONDS:g}")
    snapshot: ClusterSnapshot = state.snapshot
    writes: PodWrites = state.writes
    tenants = snapshot.tenants or {}  # tenants change only by operators' requests: read once per batch
    leaf = req.workload.tenant
    if leaf not in tenants or parent_of(leaf) not in tenants:
        return accounting.unknown_tenant(leaf, [name for name in tenants if not is_group(name)])
    tenant = tenants[parent_of(leaf)]
    config: PlanningConfig = ctx.config
    guarded = bool(snapshot.reservations) or any(t.quota for t in tenants.values())
    if not tenant.limit and not guarded and req.wait_seconds <= 0:
        return PLAN_NOW
    if tenant.limit or guarded:
        usage = dict(snapshot.tenant_usage or {})  # loaded whenever a tenant has a limit or quota (store/postgres.py)
        instances = most_instances(req, len(snapshot.nodes))
        totals, free = accounting.pod_totals(snapshot.nodes, config)
        reserved, reserved_used = reservations.tenant_totals(snapshot.reservations, snapshot.held, config)
        problem = admission_problem(
            tenants,
            usage,
            totals,
            free,
            [pending_request("arriving", leaf, normalized, instances, 0, config)],
            reserved=reserved,
            reserved_used=reserved_used,
        )
        output = solve_admission(problem)
        held_back = [v for v in output["waiting"] + output["rejected"] if v["code"] in HELD_BACK]
        if held_back:
            verdict = held_back[0]
            if verdict["code"] == "over_limit" or req.wait_seconds <= 0:
                failure = verdict_failure(tenant, verdict)
                return _refuse(ctx, writes, req, envelope, key, failure, problem, output)
            return _enqueue(writes, req, envelope, key, new_id(), _reason(verdict))
    if req.wait_seconds > 0 and (writes.waits or await _has_waiting(state)):
        reason = {"code": "queued", "message": "behind requests already waiting in the pod (admitted in DRF order)"}
        return _enqueue(writes, req, envelope, key, new_id(), reason)
    return PlanIt(may_wait=req.wait_seconds > 0)


PLAN_NOW = PlanIt(may_wait=False)


def marks(writes: PodWrites) -> tuple[int, int]:
    """Where the request's records start in `writes` (deploys, messages): what `wait_instead` undoes."""
    return len(writes.deploys), len(writes.messages)


def wait_instead(
    writes: PodWrites,
    start: tuple[int, int],
    req: DeployRequest,
    envelope: Envelope,
    key: str,
    answer: Accepted | EruError,
) -> Accepted | EruError:
    """After planning a request that may wait (`PlanIt.may_wait`): a refusal for want of room becomes a wait (the
    refusal's deploy row and event from `start` on are undone; its decision stays, as the first try); any other
    answer stands."""
    if not isinstance(answer, PlanningFailure):
        return answer
    deploy_id = str(answer.details.get("deploy_id") or new_id())
    del writes.deploys[start[0] :]
    del writes.messages[start[1] :]
    reason = {"code": answer.code, "message": answer.message}
    return _enqueue(writes, req, envelope, key, deploy_id, reason)


def _reason(verdict: Mapping[str, Any]) -> dict[str, Any]:
    return {"code": verdict["code"], "message": verdict["message"], "details": verdict.get("details", {})}


def _enqueue(
    writes: PodWrites, req: DeployRequest, envelope: Envelope, key: str, deploy_id: str, reason: dict[str, Any]
) -> Accepted:
    """The request waits: a `waiting` deploy row and its `deploy_waits` row (the store notifies the admission pass
    at commit)."""
    request = req.model_dump_json()
    writes.deploys.append(
        DeployRow(deploy_id, key, req.pod, req.workload.tenant, "waiting", request, json.dumps({"waiting": reason}))
    )
    writes.waits.append(
        WaitRow(
            deploy_id,
            key,
            req.pod,
            req.workload.tenant,
            float(req.wait_seconds),
            request,
            json.dumps(envelope.to_headers()),
            json.dumps(reason),
        )
    )
    ACTIVITY.count("deploy.waiting")
    log.debug("deploy.waiting", deploy_id=deploy_id, pod=req.pod, tenant=req.workload.tenant, reason=reason["code"])
    return Accepted(deploy_id=deploy_id)


HELD_BACK = ("limit", "over_limit", "headroom")
"""Verdicts that stop an arriving request before placement (capacity is left to the placement itself)."""


def verdict_failure(tenant: Tenant, verdict: Mapping[str, Any]) -> PlanningFailure:
    """The refusal for a held-back verdict: `tenant_limit` or `quota_headroom`, with the numbers."""
    if verdict["code"] == "headroom":
        return headroom_failure(verdict)
    return limit_failure(tenant, verdict)


def headroom_failure(verdict: Mapping[str, Any]) -> PlanningFailure:
    """The `quota_headroom` error: which guarantees the request would eat into, per resource with the numbers."""
    details = verdict.get("details", {})
    parts = ", ".join(
        f"{name}: needs {numbers['need']:g} beyond its own guarantee, {numbers['available']:g} spare of "
        f"{numbers['unreserved_free']:g} unreserved free, {numbers['headroom']:g} held"
        for name, numbers in details.get("resources", {}).items()
    )
    return PlanningFailure(
        f"{verdict['message']} ({parts})",
        code="quota_headroom",
        guarantees=details.get("guarantees", {}),
        resources=details.get("resources", {}),
    )


def limit_failure(tenant: Tenant, verdict: Mapping[str, Any]) -> PlanningFailure:
    """The `tenant_limit` error for a limit verdict, with the numbers per resource."""
    resources = verdict.get("details", {})
    parts = ", ".join(
        f"{name}: has {numbers['allocated']:g}, needs {numbers['need']:g} more, limit {numbers['limit']:g}"
        for name, numbers in resources.items()
    )
    return PlanningFailure(
        f"tenant {tenant.name!r} would exceed its limit ({parts})",
        code="tenant_limit",
        tenant=tenant.name,
        resources=resources,
    )


async def _has_waiting(state: Batch) -> bool:
    """Whether the pod has waiting requests: as the batch's read found, or asked of its session."""
    return state.waiting if state.waiting is not None else await _session_of(state).has_waiting()


def _session_of(state: Batch) -> PodSession:
    """The pod's open session; a batch planned ahead has none, and waiting requests are never planned ahead
    (`plan_ahead.may_plan_ahead`): reaching this without one is a bug, not a state to answer."""
    if state.session is None:
        raise RuntimeError("a waiting request was planned without the pod's session")
    return state.session


def _refuse(
    ctx: Deciding,
    writes: PodWrites,
    req: DeployRequest,
    envelope: Envelope,
    key: str,
    failure: PlanningFailure,
    problem: dict[str, Any],
    output: dict[str, Any],
) -> PlanningFailure:
    """Record the refusal like any other (decision, failed deploy, failed event); nothing is allocated."""
    deploy_id, decision_id = new_id(), new_id()
    writes.decisions.append(DecisionRow(decision_id, "admission", json.dumps(problem), json.dumps(output)))
    error = ErrorReply(code=failure.code, message=failure.message, details=dict(failure.details))
    result = {"rejected": True, "decision_id": decision_id, "error": error.model_dump(mode="json")}
    writes.deploys.append(
        DeployRow(deploy_id, key, req.pod, req.workload.tenant, "failed", req.model_dump_json(), json.dumps(result))
    )
    event = DeployEvent(deploy_id=deploy_id, kind="failed", error=error, decision_id=decision_id)
    event_envelope = new_envelope("eru.deploy.failed", ctx.source, correlation_id=deploy_id, causation=envelope)
    writes.messages.append(OutboxMessage(deploy_event(deploy_id, "failed"), event, event_envelope))
    ACTIVITY.count(f"deploy.refused.{failure.code}")
    log.debug(
        "deploy.refused", deploy_id=deploy_id, tenant=req.workload.tenant, code=failure.code, reason=failure.message
    )
    return PlanningFailure(failure.message, code=failure.code, deploy_id=deploy_id, **failure.details)
