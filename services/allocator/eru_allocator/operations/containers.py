"""Operations on containers (remove, replace) and the read side (nodes, pods, containers, deploys).

Every operation validates everything first and then changes everything in one transaction, with its node commands
in the outbox: nothing is ever half applied. Resources come back when the node agent confirms (containers/events.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import structlog

from eru.activity import ACTIVITY
from eru.bus import new_envelope, new_id
from eru.bus.subjects import node_command
from eru.domain import Allocation, ContainerSpec, NodeCommand, Workload
from eru.domain.messages import OperationReply, QueryRequest, RemoveRequest, ReplaceRequest
from eru.errors import InvalidInput, NotFound
from eru.podsecurity import check_workload, parse_policy
from eru.store.delivery import SettledStore
from eru.store.operations import OperationSession, OperationStore
from eru.store.protocol import OutboxMessage
from eru.store.queries import ContainerFilter, ContainerRecord, QueryStore
from eru.store.watermarks import WatermarkStore
from eru_allocator.containers.lifecycle import GONE_STATES
from eru_allocator.nodes.registry import node_rows
from eru_allocator.nodes.watermarks import stored_overrides
from eru_allocator.operations import paging, read_views
from eru_allocator.operations.workloads.views import workload_rows
from eru_allocator.rollout.history import workload_history

log = structlog.get_logger()


@dataclass(frozen=True)
class OpsContext:
    """What an operation needs from the running service: the source of its envelopes and the store's capabilities
    it goes through: operations (remove, replace, realloc, the lifecycle verbs), queries (the read side, tenants'
    ownership checks), settled requests (answers given once per request) and watermark overrides (their listing)."""

    source: str
    operations: OperationStore
    queries: QueryStore
    settled: SettledStore
    watermarks: WatermarkStore


class OnStore(Protocol):
    """What remove and replace need (an `OpsContext` has it): the source of their envelopes and the operations
    capability of the store."""

    @property
    def source(self) -> str:
        """The service's envelope source."""

    @property
    def operations(self) -> OperationStore:
        """The store's operations capability."""


async def _lock_containers(work: OperationSession, ids: list[str]) -> list[ContainerRecord]:
    rows = await work.lock_containers(ids)
    found = []
    for index, (container_id, row) in enumerate(zip(ids, rows, strict=True)):
        if row is None:
            raise NotFound(f"container_ids[{index}]", f"unknown container {container_id!r}")
        found.append(row)
    return found


async def remove(ctx: OnStore, req: RemoveRequest) -> OperationReply:
    """Ask the node agents to stop and remove the containers (state `stopping` until they confirm)."""
    ids = list(dict.fromkeys(req.container_ids))
    warnings: list[str] = []
    async with ctx.operations.operation() as work:
        rows = await _lock_containers(work, sorted(ids))
        commands: list[OutboxMessage] = []
        removing: list[NodeCommand] = []
        for row in rows:
            if row.state in GONE_STATES:
                warnings.append(f"container {row.id} is already {row.state}")
                continue
            command_id = new_id()
            command = NodeCommand(
                command_id=command_id,
                node=row.node,
                kind="remove",
                container_id=row.id,
                reason=req.reason or "removed by operator",
            )
            envelope = new_envelope(
                "eru.node.cmd.remove", ctx.source, correlation_id=row.deploy_id or row.id, message_id=command_id
            )
            commands.append(OutboxMessage(node_command(row.node, "remove"), command, envelope))
            removing.append(command)
        await work.mark_stopping([command.container_id for command in removing])
        await work.queue(commands)
    ACTIVITY.count("containers.removing", len(commands))
    log.debug("containers.removing", count=len(commands))
    return OperationReply(
        message=f"removing {len(commands)} container(s)",
        warnings=warnings,
        rows=[{"id": c.container_id, "node": c.node} for c in removing],
    )


async def replace(ctx: OnStore, req: ReplaceRequest) -> OperationReply:
    """Update a container in place (docs/planning.md): a new container takes the old one's allocation, no new charge."""
    async with ctx.operations.operation() as work:
        (old,) = await _lock_containers(work, [req.container_id])
        if old.state != "running":
            raise InvalidInput("container_id", f"container {old.id} is {old.state}; only a running one can be replaced")
        pending = await work.pending_replacement(old.id)
        if pending:
            raise InvalidInput("container_id", f"container {old.id} is already being replaced by {pending}")
        workload = await _workload_of(work, old)
        changes: dict[str, Any] = {}
        if req.image is not None:
            changes["image"] = req.image
        if req.command is not None:
            changes["command"] = req.command
        if req.env is not None:
            changes["env"] = req.env
        workload = workload.model_copy(update=changes)
        policy = await work.pod_policy(old.pod)
        check_workload(workload, parse_policy({k: v for k, v in policy.items() if k != "scorers"}), old.pod)
        new_container = new_id()
        allocation = Allocation.model_validate(json.loads(old.allocation))
        await work.insert_replacement(new_container, old, workload)
        command_id = new_id()
        command = NodeCommand(
            command_id=command_id,
            node=old.node,
            kind="replace",
            container_id=old.id,
            replacement=ContainerSpec(
                container_id=new_container,
                deploy_id=old.deploy_id or new_container,
                workload=workload,
                allocation=allocation,
            ),
            health_timeout_seconds=req.health_timeout_seconds,
        )
        envelope = new_envelope(
            "eru.node.cmd.replace", ctx.source, correlation_id=old.deploy_id or old.id, message_id=command_id
        )
        await work.queue([OutboxMessage(node_command(old.node, "replace"), command, envelope)])
    ACTIVITY.count("container.replacing")
    log.debug("container.replacing", old=old.id, new=new_container, node=old.node)
    return OperationReply(
        message=f"replacing {old.id} with {new_container} on {old.node}",
        rows=[{"old": old.id, "new": new_container, "node": old.node}],
    )


async def _workload_of(work: OperationSession, row: ContainerRecord) -> Workload:
    """The workload a container runs, from its deploy request (command and env are only kept there)."""
    request = None
    if row.deploy_id is not None:
        request = await work.deploy_request(row.deploy_id)
    if request is not None:
        workload = Workload.model_validate(request["workload"])
        return workload.model_copy(update={"image": row.image})
    return Workload(
        name=row.workload,
        image=row.image,
        tenant=row.tenant,
        priority_class=row.priority_class,
        priority=row.priority,
        labels=json.loads(row.labels),
    )


async def query(
    store: QueryStore,
    req: QueryRequest,
    down_after_seconds: float = 30.0,
    tenant: str | None = None,
    *,
    watermarks: WatermarkStore,
) -> OperationReply:
    """One page of the record: nodes, pods, containers, or one deploy with a page of its containers; with `tenant`,
    only that tenant's containers (a tenant's query, checked by `tenant_scope.scope_query` first). Listings and
    lookups go through `store` (the queries capability), the watermark overrides through `watermarks`."""
    if req.what == "nodes":
        after = paging.decode_cursor(req.cursor, 1)
        nodes = await node_rows(
            store, req.pod, req.node, down_after_seconds, after=after[0] if after else None, limit=req.limit + 1
        )
        rows, cursor = paging.fit_page(nodes, req.limit, lambda row: [row["name"]])
        return OperationReply(rows=rows, next_cursor=cursor)
    if req.what == "pods":
        after = paging.decode_cursor(req.cursor, 1)
        pods = await store.pod_page(after[0] if after else None, req.limit + 1)
        rows, cursor = paging.fit_page([pod.as_row() for pod in pods], req.limit, lambda row: [row["name"]])
        return OperationReply(rows=rows, next_cursor=cursor)
    if req.what == "containers":
        rows, cursor = await _containers(store, req, tenant)
        return OperationReply(rows=rows, next_cursor=cursor)
    if req.what == "deploys":
        rows, cursor = await _deploys(store, req, tenant)
        return OperationReply(rows=rows, next_cursor=cursor)
    if req.what == "workloads":
        rows, cursor = await workload_rows(store, req, tenant)
        return OperationReply(rows=rows, next_cursor=cursor)
    if req.what == "workload_history":  # eru_allocator.rollout.history
        return OperationReply(rows=await workload_history(store, req.workload, req.pod, tenant))
    if req.what == "watermarks":
        return OperationReply(rows=await stored_overrides(watermarks))
    if req.what == "decision":
        return OperationReply(rows=[await read_views.decision_view(store, req.decision_id)])
    if req.deploy_id is None:
        raise InvalidInput("deploy_id", "needed to show a deploy")
    deploy = await store.deploy(req.deploy_id)
    if deploy is None:
        return OperationReply(rows=[await _finished_deploy(store, req.deploy_id, req.limit)])
    containers, cursor = await _containers(store, req.model_copy(update={"deploy_id": deploy.id, "include_gone": True}))
    return OperationReply(rows=[{"deploy": deploy.as_row(), "containers": containers}], next_cursor=cursor)


async def _finished_deploy(store: QueryStore, deploy_id: str, limit: int) -> dict[str, Any]:
    """A deploy moved to history (eru.store.retention) with (up to `limit` of) its containers; past retention, when
    it expired."""
    record = await store.deploy_history(deploy_id)
    if record is None:
        gone = await store.deploy_expired_at(deploy_id)
        if gone is not None:
            raise NotFound("deploy_id", f"deploy {deploy_id!r} expired at {gone.isoformat()} (retention)")
        raise NotFound("deploy_id", f"unknown deploy {deploy_id!r}")
    deploy = json.loads(record)
    live, _ = await _containers(
        store, QueryRequest(what="containers", deploy_id=deploy["id"], include_gone=True, limit=limit)
    )
    records = await store.container_history(deploy["id"], max(0, limit - len(live)))
    return {"deploy": deploy, "containers": [*live, *(json.loads(record) for record in records)]}


async def _deploys(store: QueryStore, req: QueryRequest, tenant: str | None) -> tuple[list[dict[str, Any]], str | None]:
    """A page of deploys, newest first; the cursor is the (creation time, id) of the page's last, oldest row."""
    before = paging.decode_cursor(req.cursor, 2)
    key: tuple[datetime, str] | None = None
    if before is not None:
        key = (_cursor_time(before[0]), before[1])
    rows = await read_views.deploy_rows(store, req.pod, req.limit + 1, before=key, tenant=tenant)
    return paging.fit_page(rows, req.limit, lambda row: [row["created_at"], row["id"]])


def _cursor_time(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError as error:
        raise InvalidInput("cursor", "not a cursor from a previous page of this query") from error


async def _containers(
    store: QueryStore, req: QueryRequest, tenant: str | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    after = paging.decode_cursor(req.cursor, 3)
    key = None if after is None else (after[0], _cursor_time(after[1]), after[2])
    which = ContainerFilter(req.pod, req.node, req.deploy_id, req.container_id, req.include_gone, tenant)
    records = await store.container_page(which, key, req.limit + 1)
    return paging.fit_page(
        [record.as_row() for record in records], req.limit, lambda row: [row["node"], row["created_at"], row["id"]]
    )
