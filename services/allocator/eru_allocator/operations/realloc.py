"""Realloc (docs/planning.md): change running containers' resources by deltas, applied in place by the node agent.

Under the pod lock, the containers are grouped by node and by their current requirement (same delta → same final
requirement); each group is planned by `eru.planning.plan_realloc_group` (current allocations returned, cores already
held preferred) and either fits as a whole or fails as a whole. A group that fits is charged its new allocation at
once (state `updating`, the old allocation kept in `previous_allocation`) and its node agent gets an `update`; if the
agent refuses, the event handler restores the old allocation and usage. Every group's decision is recorded with its
input, in the `eru plan` realloc form.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import asyncpg
import structlog

from eru.bus import new_envelope, new_id
from eru.bus.subjects import node_command
from eru.domain import Allocation, NodeCommand, ResourceRequest
from eru.domain.messages import OperationReply, ReallocRequest
from eru.errors import InvalidInput, NotFound, PlanningFailure
from eru.plan_api import realloc_answer
from eru.planning import (
    NormalizedRequest,
    PlanningConfig,
    normalize_request,
    plan_realloc_group,
)
from eru.planning.batch import check_batch_growth
from eru.planning.decide import batch_fields
from eru.planning.realloc import RunningContainer, delta_from_mapping
from eru.planning.resources import node_to_mapping
from eru.store import lock_pod, transaction
from eru.store.queries import ContainerRecord
from eru.store.transaction import Connection
from eru_allocator.admission import accounting
from eru_allocator.delivery.outbox import queue_many
from eru_allocator.store import batch_allowance, container_ops, sql

log = structlog.get_logger()


def resources_of(request: NormalizedRequest, share_base: int) -> ResourceRequest:
    """A normalised requirement back in the wire form (cores, bytes)."""
    return ResourceRequest(
        cpu_bind=request.cpu_bind,
        cpu_request=request.cpu_request / share_base,
        cpu_limit=request.cpu_limit / share_base,
        memory_request=request.memory_request,
        memory_limit=request.memory_limit,
        memory_soft=request.memory_soft,
    )


async def realloc(pool: asyncpg.Pool, config: PlanningConfig, source: str, req: ReallocRequest) -> OperationReply:
    """Plan and commit a realloc; groups that do not fit are reported and keep their allocation."""
    raw_delta = req.model_dump(exclude={"container_ids"}, exclude_none=True)
    delta = delta_from_mapping(raw_delta, config, "realloc")
    ids = sorted(dict.fromkeys(req.container_ids))
    async with transaction(pool) as conn:
        pods = await container_ops.pods_of(conn, ids)
        for index, container_id in enumerate(req.container_ids):
            if container_id not in pods:
                raise NotFound(f"container_ids[{index}]", f"unknown container {container_id!r}")
        for pod in sorted(set(pods.values())):
            await lock_pod(conn, pod)
        held_before = await accounting.held_in_pods(conn, sorted(set(pods.values())), config)
        locked = await container_ops.lock_containers(conn, ids)
        groups: dict[tuple[str, str, bool], list[ContainerRecord]] = {}
        for index, row in enumerate(locked):
            if row is None:  # gone since its pod was read (moved to history)
                raise NotFound(f"container_ids[{index}]", f"unknown container {ids[index]!r}")
            if row.state != "running":
                raise InvalidInput("container_ids", f"container {row.id} is {row.state}; only running ones")
            # batch members form their own groups: they grow only into the node's batch allowance (docs/colocation.md)
            groups.setdefault((row.node, row.resources, row.priority_class == "batch"), []).append(row)
        updated: list[dict[str, Any]] = []
        warnings: list[str] = []
        for (node_name, _, _), members in sorted(groups.items(), key=lambda item: (item[0][0], item[1][0].id)):
            try:
                updated += await _realloc_group(conn, config, source, node_name, members, raw_delta, delta)
            except PlanningFailure as failure:
                warnings.append(
                    f"node {node_name}: {', '.join(m.id for m in members)} keep their allocation: {failure.message}"
                )
        if not updated:
            raise PlanningFailure(
                "no container could be reallocated: " + "; ".join(warnings), code="insufficient_resource"
            )
        await accounting.check_growth_within_limits(conn, held_before, config)  # raising rolls everything back
    return OperationReply(message=f"reallocating {len(updated)} container(s)", warnings=warnings, rows=updated)


async def _realloc_group(
    conn: Connection,
    config: PlanningConfig,
    source: str,
    node_name: str,
    members: Sequence[ContainerRecord],
    raw_delta: dict[str, Any],
    delta: Any,
) -> list[dict[str, Any]]:
    found = await container_ops.realloc_node(conn, node_name)
    if found is None:  # cannot happen while its containers reference it
        raise NotFound("container_ids", f"node {node_name} of the containers is unknown")
    node = found.resources
    batch = members[0].priority_class == "batch"
    if batch:
        conditions = {node_name: found.conditions}
        (node,) = await batch_allowance.with_batch_allowances(conn, found.pod, [node], conditions, config)
    origins = []
    for member in members:
        allocation = json.loads(member.allocation)
        origin_request = normalize_request(
            ResourceRequest.model_validate(json.loads(member.resources)), config, "resources"
        )
        origins.append(RunningContainer(origin_request, allocation.get("cpu_map") or {}, allocation.get("numa_node")))
    origin_forms = [
        {
            **json.loads(m.resources),
            "cpu_map": json.loads(m.allocation).get("cpu_map") or {},
            "numa_node": json.loads(m.allocation).get("numa_node"),
        }
        for m in members
    ]
    # one container: exactly an `eru plan` realloc problem (docs/planning.md); a group: the same with `origins`
    decision_input: dict[str, Any] = {
        "kind": "realloc",
        "config": {"share_base": config.share_base, "max_fragment_cores": config.max_fragment_cores},
        "node": {**node_to_mapping(node), **batch_fields(node, config.share_base)},
        "request": raw_delta,
    }
    if batch:
        decision_input["priority_class"] = "batch"
    if len(origin_forms) == 1:
        decision_input["origin"] = origin_forms[0]
    else:
        decision_input["origins"] = origin_forms
    decision_id = new_id()
    try:
        result = plan_realloc_group(node, origins, delta, config)
        if batch:
            check_batch_growth(node, [origin.request for origin in origins], result.requests, config.share_base)
    except PlanningFailure as failure:
        await container_ops.record_decision(
            conn, decision_id, "realloc", json.dumps(decision_input), json.dumps({"error": failure.to_dict()})
        )
        raise
    answers = [
        realloc_answer(request, plan, config.share_base)
        for request, plan in zip(result.requests, result.plans, strict=True)
    ]
    output = answers[0] if len(answers) == 1 else {"containers": answers}
    await container_ops.record_decision(conn, decision_id, "realloc", json.dumps(decision_input), json.dumps(output))
    commands = []
    updated = []
    for member, request, plan in zip(members, result.requests, result.plans, strict=True):
        old = json.loads(member.allocation)
        new = Allocation(
            cpu_map=dict(plan.cpu_map),
            numa_node=plan.numa_node,
            memory=plan.memory,
            share_base=config.share_base,
            cpu_bind=request.cpu_bind,
            cpu_limit=request.cpu_limit / config.share_base,
            memory_limit=request.memory_limit,
            memory_soft=request.memory_soft,
        )
        await sql.change_usage(conn, node_name, sql.allocation_usage(old), -1)
        await sql.change_usage(conn, node_name, sql.allocation_usage(new.model_dump()), 1)
        previous = {**old, "resources": json.loads(member.resources)}
        await container_ops.mark_updating(
            conn,
            member.id,
            new.model_dump_json(),
            resources_of(request, config.share_base).model_dump_json(),
            json.dumps(previous),
        )
        command_id = new_id()
        command = NodeCommand(
            command_id=command_id,
            node=node_name,
            kind="update",
            container_id=member.id,
            allocation=new,
            reason=f"realloc (decision {decision_id})",
        )
        envelope = new_envelope("eru.node.cmd.update", source, correlation_id=decision_id, message_id=command_id)
        commands.append((node_command(node_name, "update"), command, envelope))
        updated.append({**member.as_row(), "allocation": new.model_dump(mode="json"), "state": "updating"})
    await queue_many(conn, commands)
    log.info("containers.reallocating", node=node_name, count=len(commands), decision_id=decision_id)
    return updated
