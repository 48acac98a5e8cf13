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
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import structlog

from eru.bus import new_envelope, new_id
from eru.bus.subjects import node_command
from eru.domain import Allocation, NodeCommand, ResourceRequest
from eru.domain.messages import OperationReply, ReallocRequest
from eru.errors import InvalidInput, NotFound, PlanningFailure
from eru.fairness.drf import Tenant, TenantUsage
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
from eru.store.operations import OperationSession, OperationStore
from eru.store.protocol import DecisionRow, OutboxMessage
from eru.store.queries import ContainerRecord
from eru_allocator.store.sql import allocation_usage

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


async def realloc(store: OperationStore, config: PlanningConfig, source: str, req: ReallocRequest) -> OperationReply:
    """Plan and commit a realloc in one unit of work of `store`; groups that do not fit are reported and keep their
    allocation."""
    raw_delta = req.model_dump(exclude={"container_ids"}, exclude_none=True)
    delta = delta_from_mapping(raw_delta, config, "realloc")
    ids = sorted(dict.fromkeys(req.container_ids))
    async with store.operation() as work:
        pods = await work.pods_of(ids)
        for index, container_id in enumerate(req.container_ids):
            if container_id not in pods:
                raise NotFound(f"container_ids[{index}]", f"unknown container {container_id!r}")
        await work.lock_pods(sorted(set(pods.values())))
        held_before = {pod: await work.held(pod, config) for pod in sorted(set(pods.values()))}
        locked = await work.lock_containers(ids)
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
                updated += await _realloc_group(work, config, source, node_name, members, raw_delta, delta)
            except PlanningFailure as failure:
                warnings.append(
                    f"node {node_name}: {', '.join(m.id for m in members)} keep their allocation: {failure.message}"
                )
        if not updated:
            raise PlanningFailure(
                "no container could be reallocated: " + "; ".join(warnings), code="insufficient_resource"
            )
        held_after = {pod: await work.held(pod, config) for pod in held_before}
        over = growth_over_limit(held_before, held_after, await work.tenants())
        if over is not None:
            raise over  # rolls everything back
    return OperationReply(message=f"reallocating {len(updated)} container(s)", warnings=warnings, rows=updated)


async def _realloc_group(
    work: OperationSession,
    config: PlanningConfig,
    source: str,
    node_name: str,
    members: Sequence[ContainerRecord],
    raw_delta: dict[str, Any],
    delta: Any,
) -> list[dict[str, Any]]:
    found = await work.node(node_name)
    if found is None:  # cannot happen while its containers reference it
        raise NotFound("container_ids", f"node {node_name} of the containers is unknown")
    node = found.resources
    batch = members[0].priority_class == "batch"
    if batch:
        node = await work.with_batch_allowance(found, config)
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
        await work.record_decision(
            DecisionRow(decision_id, "realloc", json.dumps(decision_input), json.dumps({"error": failure.to_dict()}))
        )
        raise
    answers = [
        realloc_answer(request, plan, config.share_base)
        for request, plan in zip(result.requests, result.plans, strict=True)
    ]
    output = answers[0] if len(answers) == 1 else {"containers": answers}
    await work.record_decision(DecisionRow(decision_id, "realloc", json.dumps(decision_input), json.dumps(output)))
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
        await work.change_usage(node_name, allocation_usage(old), -1)
        await work.change_usage(node_name, allocation_usage(new.model_dump()), 1)
        previous = {**old, "resources": json.loads(member.resources)}
        await work.mark_updating(
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
        commands.append(OutboxMessage(node_command(node_name, "update"), command, envelope))
        updated.append({**member.as_row(), "allocation": new.model_dump(mode="json"), "state": "updating"})
    await work.queue(commands)
    log.info("containers.reallocating", node=node_name, count=len(commands), decision_id=decision_id)
    return updated


def growth_over_limit(
    before: Mapping[str, Mapping[str, TenantUsage]],
    after: Mapping[str, Mapping[str, TenantUsage]],
    tenants: Mapping[str, Tenant],
) -> PlanningFailure | None:
    """The `tenant_limit` failure when a tenant holds more than its limit on some resource in some pod `after` a
    realloc's changes and more than it held `before` (a tenant already over a lowered limit may still shrink)."""
    for pod, previous in before.items():
        for name, usage in after.get(pod, {}).items():
            tenant = tenants.get(name)
            if tenant is None or not tenant.limit:
                continue
            old = previous.get(name, TenantUsage()).allocated
            for resource, cap in tenant.limit.items():
                now, was = usage.allocated.get(resource, Fraction(0)), old.get(resource, Fraction(0))
                if now > cap and now > was:
                    return PlanningFailure(
                        f"tenant {name!r} would exceed its limit in pod {pod!r} ({resource}: has {float(was):g}, "
                        f"needs {float(now - was):g} more, limit {float(cap):g})",
                        code="tenant_limit",
                        tenant=name,
                        pod=pod,
                        resources={resource: {"limit": float(cap), "allocated": float(was), "need": float(now - was)}},
                    )
    return None
