"""A deploy request before any state is read (docs/pipeline.md): the checks that need no store (`validate`), how a
repeated request is answered from what it made (`answer_for_existing`), the pod policy's refusal
(`refused_by_policy`) and the request as the pure decision sees it (`ask_of`)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from eru.domain import Accepted, DeployRequest
from eru.errors import EruError, InvalidInput
from eru.planning import NormalizedRequest, PlanningConfig, normalize_request
from eru.planning.modes import get_mode
from eru.planning.node_filter import NodeFilter, node_filter
from eru.planning.snapshot import DeployAsk
from eru.podsecurity import PodPolicy, check_workload
from eru_allocator import batch_allowance
from eru_allocator.keeper import check_keep


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
    normalized = normalize_request(request.workload.resources, config, "workload.resources")
    batch = batch_allowance.is_batch(request)
    check_keep(request, batch)
    return dataclasses.replace(normalized, batch=batch)


def answer_for_existing(deploy_id: str | None, status: str, result: Any, key: str = "") -> Accepted | EruError:
    """What a repeated request is answered: the deploy it made, or the error it ended in before anything started
    (a request dead-lettered earlier is refused until an operator redrives it)."""
    stored = json.loads(result) if isinstance(result, str) else (result or {})
    if status == "settled:dead_lettered" or deploy_id is None:
        reason = stored.get("reason") if isinstance(stored, dict) else None
        return EruError(
            f"request {key} was dead-lettered ({reason or 'no reason recorded'}); `eru dlq redrive` re-submits it",
            code="dead_lettered",
            request_id=key,
        )
    error = stored.get("error") if isinstance(stored, dict) else None
    if status == "failed" and isinstance(error, dict) and stored.get("rejected"):
        return EruError(
            error.get("message", "failed"),
            code=error.get("code", "error"),
            deploy_id=deploy_id,
            **error.get("details", {}),
        )
    return Accepted(deploy_id=deploy_id)


def refused_by_policy(req: DeployRequest, policy: PodPolicy, pod: str) -> InvalidInput | None:
    """The pod policy's refusal of the workload (privileges, host access, image allow-list), if any."""
    try:
        check_workload(req.workload, policy, pod)
    except InvalidInput as error:
        return error
    return None


def ask_of(req: DeployRequest, normalized: NormalizedRequest) -> DeployAsk:
    """A deploy request as the decision sees it."""
    workload = req.workload
    return DeployAsk(
        normalized,
        req.mode,
        req.count,
        req.nodes_limit,
        req.options,
        workload=workload.name,
        tenant=workload.tenant,
        resources=workload.resources.model_dump(mode="json"),
        avoid_evictions=normalized.batch,  # the eviction memory is of batch placement (docs/colocation.md)
        node_filter=filter_of(req),
    )


def filter_of(req: DeployRequest) -> NodeFilter | None:
    """The request's node filter as the decision sees it (None when it has none)."""
    spec = req.node_filter
    if spec is None:
        return None
    return node_filter(spec.nodes, spec.exclude_nodes, spec.labels) or None
