"""A deploy request meets its tenant (SPEC §8): limit enforcement, and waiting for capacity instead of failing.

`plan_or_wait` runs inside the batch transaction, under the pod lock, in place of a direct plan:

* an unknown tenant is refused (`workload.tenant`);
* a tenant without a limit and a request without `wait_seconds` go straight to planning (Eru's fail-at-once);
* over the limit: refused with code `tenant_limit` and the numbers (nothing allocated) — unless the request may
  wait and its demand alone is within the limit, then it waits for its tenant's own containers to go;
* a request that may wait joins the queue when its pod already has waiting requests (it must not overtake them:
  admission is in DRF order, `admission.py`), and when planning finds no room.

A waiting request has a `deploys` row with status `waiting` and a `deploy_waits` row; the client is answered
`accepted` with its deploy id and follows the deploy's events (planned … or failed with code `wait_expired`).
Every limit check is recorded as an `admission` decision whose input `eru.fairness.admission_json.solve_admission`
replays.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import structlog

from eru.bus import Envelope, new_envelope, new_id
from eru.bus.subjects import deploy_event
from eru.domain import Accepted, DeployEvent, DeployRequest, ErrorReply
from eru.errors import EruError, InvalidInput, PlanningFailure
from eru.fairness import Tenant, TenantUsage
from eru.fairness.admission_json import solve_admission
from eru.fairness.quantities import json_number, json_resources
from eru.planning import NormalizedRequest, PlanningConfig
from eru.store.transaction import Connection
from eru_allocator import tenants as accounting

log = structlog.get_logger()

CHANNEL = "eru_admission"
MAX_WAIT_SECONDS = 7 * 86400.0
"""The longest a request may wait: the deploy stream keeps its events a week (a client must be able to follow it)."""
INSERT_WAIT_SQL = """
INSERT INTO deploy_waits (deploy_id, request_key, pod, tenant, deadline, request, envelope, reason)
VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5), $6::jsonb, $7::jsonb, $8::jsonb)
"""

Plan = Callable[..., Awaitable[Accepted | EruError]]
"""`deploys._plan_one(ctx, state, req, normalized, envelope, key, deploy_id=None)`."""


def admission_problem(
    tenants: Mapping[str, Tenant],
    usage: Mapping[str, TenantUsage],
    totals: Mapping[str, Fraction],
    free: Mapping[str, Fraction],
    pending: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The `solve_admission` input (JSON) for `pending` requests: the tenants they belong to, with their usage."""
    names = list(dict.fromkeys(str(p["tenant"]) for p in pending))
    rows = []
    for name in names:
        tenant, held = tenants[name], usage.get(name, TenantUsage())
        rows.append(
            {
                "name": name,
                "weight": json_number(tenant.weight),
                "quota": json_resources(tenant.quota),
                "limit": json_resources(tenant.limit),
                "allocated": json_resources(held.allocated),
                "allocations": held.allocations,
            }
        )
    return {
        "kind": "admission",
        "totals": json_resources(totals),
        "free": json_resources(free),
        "tenants": rows,
        "pending": list(pending),
    }


def pending_entry(
    deploy_id: str, tenant: str, demand: Mapping[str, Fraction], count: int, arrival: int
) -> dict[str, Any]:
    """One pending request in a `solve_admission` problem."""
    return {"id": deploy_id, "tenant": tenant, "demand": json_resources(demand), "instances": count, "arrival": arrival}


def most_instances(req: DeployRequest, nodes: int) -> int:
    """The most instances the request can make: `count`, or for modes `each` and `fill` (count per node) `count` on
    every schedulable node — the bound its tenant's limit is checked against, before placement."""
    return req.count * nodes if req.mode in ("each", "fill") else req.count


def in_batch_usage(state: Any, usage: dict[str, TenantUsage], config: PlanningConfig) -> None:
    """Add the containers planned earlier in this batch (not written yet) to `usage`."""
    for row in state.containers:
        accounting.add_held(usage, row[6], row[10], 1, config)


async def plan_or_wait(
    ctx: Any,
    conn: Connection,
    state: Any,
    req: DeployRequest,
    normalized: NormalizedRequest,
    envelope: Envelope,
    key: str,
    plan: Plan,
) -> Accepted | EruError:
    """Check the request against its tenant, then plan it, queue it, or refuse it (see the module doc)."""
    if req.wait_seconds > MAX_WAIT_SECONDS:
        return InvalidInput("wait_seconds", f"{req.wait_seconds:g} is above the longest wait, {MAX_WAIT_SECONDS:g}")
    # tenants change only by operators' requests: one read per tenant and batch, not per request
    tenants: dict[str, Tenant | None] = state.tenants
    if req.workload.tenant not in tenants:
        tenants[req.workload.tenant] = await accounting.load_tenant(conn, req.workload.tenant)
    tenant = tenants[req.workload.tenant]
    if tenant is None:
        known = [r["name"] for r in await conn.fetch("SELECT name FROM tenants ORDER BY name LIMIT 20")]
        return accounting.unknown_tenant(req.workload.tenant, known)
    if not tenant.limit and req.wait_seconds <= 0:
        return await plan(ctx, state, req, normalized, envelope, key)
    config: PlanningConfig = ctx.config
    if tenant.limit:
        usage = await accounting.held(conn, req.pod, config)
        in_batch_usage(state, usage, config)
        instances = most_instances(req, len(state.nodes))
        demand = accounting.request_demand(normalized, instances, config)
        totals, free = accounting.pod_totals(state.nodes, config)
        problem = admission_problem(
            {tenant.name: tenant}, usage, totals, free, [pending_entry("arriving", tenant.name, demand, instances, 0)]
        )
        output = solve_admission(problem)
        limited = [v for v in output["waiting"] + output["rejected"] if v["code"] in ("limit", "over_limit")]
        if limited:
            verdict = limited[0]
            if verdict["code"] == "over_limit" or req.wait_seconds <= 0:
                return _refuse_over_limit(ctx, state, req, envelope, key, tenant, verdict, problem, output)
            return await _enqueue(conn, state, req, envelope, key, new_id(), _reason(verdict))
    if req.wait_seconds > 0 and await conn.fetchval("SELECT 1 FROM deploy_waits WHERE pod = $1 LIMIT 1", req.pod):
        reason = {"code": "queued", "message": "behind requests already waiting in the pod (admitted in DRF order)"}
        return await _enqueue(conn, state, req, envelope, key, new_id(), reason)
    marks = (len(state.deploys), len(state.messages))
    answer = await plan(ctx, state, req, normalized, envelope, key)
    if isinstance(answer, PlanningFailure) and req.wait_seconds > 0:
        # not now: undo the refusal's records (its decision stays, as the first try) and wait instead
        deploy_id = str(answer.details.get("deploy_id") or new_id())
        del state.deploys[marks[0] :]
        del state.messages[marks[1] :]
        reason = {"code": answer.code, "message": answer.message}
        return await _enqueue(conn, state, req, envelope, key, deploy_id, reason)
    return answer


def _reason(verdict: Mapping[str, Any]) -> dict[str, Any]:
    return {"code": verdict["code"], "message": verdict["message"], "details": verdict.get("details", {})}


async def _enqueue(
    conn: Connection,
    state: Any,
    req: DeployRequest,
    envelope: Envelope,
    key: str,
    deploy_id: str,
    reason: dict[str, Any],
) -> Accepted:
    state.deploys.append(
        (
            deploy_id,
            key,
            req.pod,
            req.workload.tenant,
            "waiting",
            req.model_dump_json(),
            json.dumps({"waiting": reason}),
        )
    )
    await conn.execute(
        INSERT_WAIT_SQL,
        deploy_id,
        key,
        req.pod,
        req.workload.tenant,
        float(req.wait_seconds),
        req.model_dump_json(),
        json.dumps(envelope.to_headers()),
        json.dumps(reason),
    )
    await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, req.pod)  # delivered at commit: an admission pass runs
    log.info("deploy.waiting", deploy_id=deploy_id, pod=req.pod, tenant=req.workload.tenant, reason=reason["code"])
    return Accepted(deploy_id=deploy_id)


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


def _refuse_over_limit(
    ctx: Any,
    state: Any,
    req: DeployRequest,
    envelope: Envelope,
    key: str,
    tenant: Tenant,
    verdict: Mapping[str, Any],
    problem: dict[str, Any],
    output: dict[str, Any],
) -> PlanningFailure:
    """Record the refusal like any other (decision, failed deploy, failed event); nothing is allocated."""
    failure = limit_failure(tenant, verdict)
    deploy_id, decision_id = new_id(), new_id()
    state.decisions.append((decision_id, "admission", json.dumps(problem), json.dumps(output)))
    error = ErrorReply(code=failure.code, message=failure.message, details=dict(failure.details))
    result = {"rejected": True, "decision_id": decision_id, "error": error.model_dump(mode="json")}
    state.deploys.append(
        (deploy_id, key, req.pod, req.workload.tenant, "failed", req.model_dump_json(), json.dumps(result))
    )
    event = DeployEvent(deploy_id=deploy_id, kind="failed", error=error, decision_id=decision_id)
    event_envelope = new_envelope("eru.deploy.failed", ctx.source, correlation_id=deploy_id, causation=envelope)
    state.messages.append((deploy_event(deploy_id, "failed"), event, event_envelope))
    log.info("deploy.tenant_limit", deploy_id=deploy_id, tenant=tenant.name, reason=failure.message)
    return PlanningFailure(failure.message, code=failure.code, deploy_id=deploy_id, **failure.details)
