"""Deploy requests (SPEC §4): validate, lock the pod, snapshot, capacities, distributor, concrete plans, ONE commit.

The idempotency key is the client's `request_id`, or the request message's envelope id (stable across redeliveries),
so a redelivery, a client retry or a replica that died between commit and ack finds the deploy already made and
answers with it; `deploys.request_id` is unique, so two replicas can never both commit one key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import asyncpg
import structlog

from eru.bus import Envelope, RemoteError, RequestTimeout, Retryable, new_envelope, new_id, request
from eru.bus.errors import NoResponders
from eru.bus.subjects import DISTRIBUTOR_PLACE, deploy_event, node_command
from eru.domain import (
    Accepted,
    Allocation,
    ContainerSpec,
    DeployEvent,
    DeployRequest,
    ErrorReply,
    NodeCommand,
    PlacementSlot,
    PlaceReply,
    PlaceRequest,
)
from eru.errors import EruError, InvalidInput, PlanningFailure
from eru.planning import (
    ContainerPlan,
    NodeResources,
    NormalizedRequest,
    PlanningConfig,
    materialize,
    normalize_request,
    placement_slots,
)
from eru.planning.modes import get_mode
from eru.store import lock_pod, transaction
from eru.store.transaction import Connection
from eru_allocator import records
from eru_allocator.outbox import queue, queue_many

log = structlog.get_logger()

FIND_DEPLOY_SQL = "SELECT id, status, result FROM deploys WHERE request_id = $1"


@dataclass(frozen=True)
class Context:
    """What a deploy needs from the running service."""

    pool: Any
    nc: Any
    config: PlanningConfig
    source: str
    place_timeout_seconds: float
    node_down_after_seconds: float


def validate(request: DeployRequest, config: PlanningConfig) -> NormalizedRequest:
    """Checks that need no state: count bound, known mode, normalised resources (`InvalidInput` naming the field)."""
    if request.count > config.max_deploy_count:
        raise InvalidInput(
            "count",
            f"{request.count} is above max_deploy_count {config.max_deploy_count}",
            count=request.count,
            max_deploy_count=config.max_deploy_count,
        )
    get_mode(request.mode)
    return normalize_request(request.workload.resources, config, "workload.resources")


def answer_for_existing(deploy_id: str, status: str, result: Any) -> Accepted | EruError:
    """What a repeated request is answered: the deploy it made, or the error it ended in before anything started."""
    stored = json.loads(result) if isinstance(result, str) else (result or {})
    error = stored.get("error") if isinstance(stored, dict) else None
    if status == "failed" and isinstance(error, dict) and stored.get("rejected"):
        return EruError(
            error.get("message", "failed"),
            code=error.get("code", "error"),
            deploy_id=deploy_id,
            **error.get("details", {}),
        )
    return Accepted(deploy_id=deploy_id)


async def deploy(ctx: Context, req: DeployRequest, envelope: Envelope) -> Accepted | EruError:
    """Plan and commit one request; returns the answer for the client (an `EruError` is an error reply).

    Raises `Retryable` when the distributor cannot be reached: nothing is committed and the request comes back.
    """
    try:
        normalized = validate(req, ctx.config)
    except InvalidInput as error:
        return error
    key = req.request_id or envelope.id
    existing = await ctx.pool.fetchrow(FIND_DEPLOY_SQL, key)
    if existing is not None:
        return answer_for_existing(existing["id"], existing["status"], existing["result"])
    deploy_id = new_id()
    try:
        async with transaction(ctx.pool) as conn:
            await lock_pod(conn, req.pod)
            existing = await conn.fetchrow(FIND_DEPLOY_SQL, key)
            if existing is not None:
                return answer_for_existing(existing["id"], existing["status"], existing["result"])
            if await conn.fetchval("SELECT 1 FROM pods WHERE name = $1", req.pod) is None:
                known = [row["name"] for row in await conn.fetch("SELECT name FROM pods ORDER BY name LIMIT 20")]
                return InvalidInput("pod", f"unknown pod {req.pod!r} (known: {', '.join(known) or 'none'})")
            return await _plan_and_commit(ctx, conn, req, normalized, envelope, key, deploy_id)
    except asyncpg.UniqueViolationError:
        # the same key committed by another replica in another pod's lock: answer with what it made
        existing = await ctx.pool.fetchrow(FIND_DEPLOY_SQL, key)
        if existing is None:
            raise
        return answer_for_existing(existing["id"], existing["status"], existing["result"])


async def _plan_and_commit(
    ctx: Context,
    conn: Connection,
    req: DeployRequest,
    normalized: NormalizedRequest,
    envelope: Envelope,
    key: str,
    deploy_id: str,
) -> Accepted | EruError:
    nodes = await records.schedulable_nodes(conn, req.pod, ctx.node_down_after_seconds)
    counts = await records.workload_counts(conn, req.pod, req.workload.name)
    slots = placement_slots(nodes, normalized, ctx.config, counts)
    problem = decision_input(ctx.config, req, nodes, counts)
    decision_id = new_id()
    try:
        if not nodes:
            raise PlanningFailure(
                f"pod {req.pod!r} has no schedulable node (all cordoned, down or none registered)",
                code="no_schedulable_node",
                pod=req.pod,
            )
        placements = await _ask_distributor(ctx, req, slots, envelope)
        plans = materialize(nodes, normalized, ctx.config, placements)
    except PlanningFailure as failure:
        failed_output = {"error": failure.to_dict()}
        await conn.execute(
            records.INSERT_DECISION_SQL, decision_id, "deploy", json.dumps(problem), json.dumps(failed_output)
        )
        await _record_rejected(ctx, conn, req, envelope, key, deploy_id, decision_id, failure)
        log.info("deploy.failed", deploy_id=deploy_id, pod=req.pod, code=failure.code, reason=failure.message)
        return PlanningFailure(failure.message, code=failure.code, deploy_id=deploy_id, **failure.details)
    capacities = {slot.name: slot.capacity for slot in slots}
    output: dict[str, Any] = {
        "deploy": placements,
        "capacity": capacities,
        "total": sum(capacities.values()),
        "containers": [plan.to_dict() for plan in plans],
    }
    await conn.execute(records.INSERT_DECISION_SQL, decision_id, "deploy", json.dumps(problem), json.dumps(output))
    await conn.execute(
        records.INSERT_DEPLOY_SQL,
        deploy_id,
        key,
        req.pod,
        req.workload.tenant,
        "planned",
        req.model_dump_json(),
        json.dumps({"placements": placements, "decision_id": decision_id}),
    )
    await _commit_containers(ctx, conn, req, normalized, envelope, deploy_id, plans, nodes)
    planned = DeployEvent(deploy_id=deploy_id, kind="planned", placements=placements, decision_id=decision_id)
    await queue(conn, deploy_event(deploy_id, "planned"), planned, _event_envelope(ctx, "planned", deploy_id, envelope))
    if not plans:
        await conn.execute("UPDATE deploys SET status = 'completed' WHERE id = $1", deploy_id)
        done = DeployEvent(deploy_id=deploy_id, kind="completed", decision_id=decision_id)
        await queue(
            conn, deploy_event(deploy_id, "completed"), done, _event_envelope(ctx, "completed", deploy_id, envelope)
        )
    log.info("deploy.planned", deploy_id=deploy_id, pod=req.pod, placements=placements)
    return Accepted(deploy_id=deploy_id)


async def _ask_distributor(ctx: Context, req: DeployRequest, slots: list[Any], envelope: Envelope) -> dict[str, int]:
    place = PlaceRequest(
        mode=req.mode,
        count=req.count,
        nodes_limit=req.nodes_limit,
        options=req.options,
        slots=[
            PlacementSlot(
                name=s.name, capacity=s.capacity, count=s.count, usage=s.usage, rate=s.rate, labels=dict(s.labels)
            )
            for s in slots
        ],
    )
    try:
        reply = await request(
            ctx.nc,
            DISTRIBUTOR_PLACE,
            place,
            PlaceReply,
            ctx.place_timeout_seconds,
            envelope=envelope.caused("eru.distributor.place", ctx.source),
            source=ctx.source,
        )
    except (RequestTimeout, NoResponders) as error:
        raise Retryable(f"distributor unavailable: {error.message}", delay=1.0) from None
    except RemoteError as error:
        if error.code == "invalid_input":
            field = str(error.details.get("field") or "mode")
            raise InvalidInput(field, error.message.removeprefix(f"{field}: ")) from None
        if error.code == "internal":
            raise Retryable(f"distributor failed: {error.message}", delay=1.0) from None
        details = {k: v for k, v in error.details.items() if k not in ("code", "message")}
        raise PlanningFailure(error.message, code=error.code, **details) from None
    return dict(reply.placements)


def decision_input(
    config: PlanningConfig, req: DeployRequest, nodes: list[NodeResources], counts: dict[str, int]
) -> dict[str, Any]:
    """The decision's full input as an `eru plan` problem (SPEC §10), so `eru plan` can re-run it."""
    problem: dict[str, Any] = {
        "kind": "deploy",
        "config": {
            "share_base": config.share_base,
            "max_fragment_cores": config.max_fragment_cores,
            "max_deploy_count": config.max_deploy_count,
        },
        "mode": req.mode,
        "count": req.count,
        "nodes_limit": req.nodes_limit,
        "request": req.workload.resources.model_dump(mode="json"),
        "nodes": [
            {
                "name": node.name,
                "cpu_map": dict(node.cpu_map),
                "memory": node.memory,
                "numa": dict(node.numa),
                "numa_memory": dict(node.numa_memory),
                "used": {
                    "cpu_map": dict(node.used_cpu_map),
                    "memory": node.used_memory,
                    "numa_memory": dict(node.used_numa_memory),
                },
                "count": counts.get(node.name, 0),
            }
            for node in nodes
        ],
    }
    if req.options:
        problem["options"] = req.options
    return problem


def allocation_of(plan: ContainerPlan, normalized: NormalizedRequest, config: PlanningConfig) -> Allocation:
    """The wire allocation of one planned instance (cpuset, shares, quota and memory for the node agent)."""
    return Allocation(
        cpu_map=dict(plan.cpu_map),
        numa_node=plan.numa_node,
        memory=plan.memory,
        share_base=config.share_base,
        cpu_bind=normalized.cpu_bind,
        cpu_limit=normalized.cpu_limit / config.share_base,
        memory_limit=normalized.memory_limit,
        memory_soft=normalized.memory_soft,
    )


async def _commit_containers(
    ctx: Context,
    conn: Connection,
    req: DeployRequest,
    normalized: NormalizedRequest,
    envelope: Envelope,
    deploy_id: str,
    plans: list[ContainerPlan],
    nodes: list[NodeResources],
) -> None:
    workload = req.workload
    resources = workload.resources.model_dump_json()
    labels = json.dumps(workload.labels)
    rows: list[tuple[Any, ...]] = []
    commands: list[tuple[str, NodeCommand, Envelope]] = []
    per_node: dict[str, list[records.Usage]] = {}
    for plan in plans:
        container_id = new_id()
        allocation = allocation_of(plan, normalized, ctx.config)
        rows.append(
            (
                container_id,
                deploy_id,
                plan.node,
                req.pod,
                workload.name,
                workload.image,
                workload.tenant,
                workload.priority_class,
                workload.priority,
                allocation.model_dump_json(),
                resources,
                "planned",
                labels,
                None,
            )
        )
        command_id = new_id()
        command = NodeCommand(
            command_id=command_id,
            node=plan.node,
            kind="create",
            container_id=container_id,
            spec=ContainerSpec(
                container_id=container_id, deploy_id=deploy_id, workload=workload, allocation=allocation
            ),
        )
        cmd_envelope = new_envelope(
            "eru.node.cmd.create", ctx.source, correlation_id=deploy_id, causation=envelope, message_id=command_id
        )
        commands.append((node_command(plan.node, "create"), command, cmd_envelope))
        per_node.setdefault(plan.node, []).append(records.allocation_usage(allocation.model_dump()))
    if rows:
        await conn.executemany(records.INSERT_CONTAINER_SQL, rows)
    for name in sorted(per_node):  # node rows locked in name order: no deadlock between replicas
        await records.change_usage(conn, name, records.total_usage(per_node[name]), 1)
    await queue_many(conn, commands)


async def _record_rejected(
    ctx: Context,
    conn: Connection,
    req: DeployRequest,
    envelope: Envelope,
    key: str,
    deploy_id: str,
    decision_id: str,
    failure: PlanningFailure,
) -> None:
    error = ErrorReply(code=failure.code, message=failure.message, details=_plain(failure.details))
    result = {"rejected": True, "decision_id": decision_id, "error": error.model_dump(mode="json")}
    await conn.execute(
        records.INSERT_DEPLOY_SQL,
        deploy_id,
        key,
        req.pod,
        req.workload.tenant,
        "failed",
        req.model_dump_json(),
        json.dumps(result),
    )
    failed = DeployEvent(deploy_id=deploy_id, kind="failed", error=error, decision_id=decision_id)
    await queue(conn, deploy_event(deploy_id, "failed"), failed, _event_envelope(ctx, "failed", deploy_id, envelope))


def _event_envelope(ctx: Context, kind: str, deploy_id: str, cause: Envelope) -> Envelope:
    return new_envelope(f"eru.deploy.{kind}", ctx.source, correlation_id=deploy_id, causation=cause)


def _plain(details: dict[str, Any]) -> dict[str, Any]:
    plain: dict[str, Any] = json.loads(json.dumps(details, default=str))
    return plain
