"""The lifecycle verbs against the ledger: resolve the containers (by id, or a workload's live instances), check
every one, then queue every node command in one transaction (the outbox): all or nothing. The ledger moves when
the agents confirm (`lifecycle.transition`); the reply says what was asked of which container, and what is left as
it was and why."""

from __future__ import annotations

from typing import Any

import structlog

from eru.activity import ACTIVITY
from eru.bus import new_envelope, new_id
from eru.bus.subjects import node_command
from eru.domain import NodeCommand
from eru.domain.messages import LifecycleRequest, OperationReply, RemoveRequest
from eru.errors import InvalidInput, NotFound, PermissionDenied
from eru.fairness.ledger import parent_of
from eru.store.operations import OperationSession, OperationStore
from eru.store.protocol import OutboxMessage
from eru.store.queries import ContainerRecord
from eru_allocator.operations import containers as container_ops
from eru_allocator.operations.workloads.actions import TARGET, VERB, decide

log = structlog.get_logger()


async def workload_containers(work: OperationSession, req: LifecycleRequest, tenant: str | None = None) -> list[str]:
    """The live containers of `req.workload` (in `req.pod`, of `req.tenant`); `tenant`: a tenant's request, which
    sees only its own (and is refused, learning nothing, when it has none by that name)."""
    assert req.workload is not None
    rows = await work.live_of_workload(req.workload, req.pod)
    where = f" in pod {req.pod!r}" if req.pod else ""
    if tenant is not None:
        if req.tenant is not None and parent_of(req.tenant) != tenant:
            raise PermissionDenied(
                f"permission denied: tenant: these credentials act for tenant {tenant!r}, not {req.tenant!r}",
                field="tenant",
                tenant=tenant,
            )
        rows = [r for r in rows if parent_of(r.tenant) == tenant]
        if not rows:
            raise PermissionDenied(
                f"permission denied: workload: {req.workload!r} is not a workload of tenant {tenant!r}{where}",
                field="workload",
                tenant=tenant,
            )
    if req.tenant is not None:
        rows = [r for r in rows if r.tenant == req.tenant]
    if not rows:
        of = f" of tenant {req.tenant!r}" if req.tenant else ""
        raise NotFound("workload", f"unknown workload {req.workload!r}{of}{where} (no live container runs it)")
    tenants = sorted({r.tenant for r in rows})
    if len(tenants) > 1:
        raise InvalidInput(
            "workload",
            f"{req.workload!r} is a workload of tenants {', '.join(tenants)}: name one with --tenant",
        )
    return [r.id for r in rows]


async def change(
    work: OperationSession, source: str, action: str, req: LifecycleRequest, tenant: str | None = None
) -> OperationReply:
    """Send `action` (stop, start, restart, dissociate) to the request's containers, inside the caller's
    transaction; `InvalidInput`/`NotFound` before anything is queued when one of them cannot take it."""
    by_workload = req.workload is not None
    ids = await workload_containers(work, req, tenant) if by_workload else list(dict.fromkeys(req.container_ids))
    rows: list[ContainerRecord] = []
    position = {container_id: index for index, container_id in enumerate(ids)}
    for container_id in sorted(ids):  # locks in one order: concurrent requests never deadlock
        (row,) = await work.lock_containers([container_id])
        if row is None:
            raise NotFound(f"container_ids[{position[container_id]}]", f"unknown container {container_id!r}")
        rows.append(row)
    acted: list[dict[str, Any]] = []
    warnings: list[str] = []
    commands: list[OutboxMessage] = []
    for row in sorted(rows, key=lambda r: position[r.id]):
        decision = decide(action, row.id, row.state)
        if decision.refusal is not None:
            field = "workload" if by_workload else f"container_ids[{position[row.id]}]"
            raise InvalidInput(field, decision.refusal)
        if decision.note is not None:
            warnings.append(decision.note)
            continue
        command_id = new_id()
        command = NodeCommand(
            command_id=command_id,
            node=row.node,
            kind=action,
            container_id=row.id,
            reason=req.reason or f"{TARGET[action]} by operator",
        )
        envelope = new_envelope(
            f"eru.node.cmd.{action}", source, correlation_id=row.deploy_id or row.id, message_id=command_id
        )
        commands.append(OutboxMessage(node_command(row.node, action), command, envelope))
        acted.append(
            {
                "id": row.id,
                "node": row.node,
                "workload": row.workload,
                "from": row.state,
                "to": TARGET[action],
            }
        )
    await work.queue(commands)
    ACTIVITY.count(f"containers.{action}", len(commands))
    log.debug(f"containers.{action}", count=len(commands))
    of = f" of workload {req.workload}" if by_workload else ""
    return OperationReply(message=f"{VERB[action]} {len(acted)} container(s){of}", warnings=warnings, rows=acted)


async def act(
    store: OperationStore, source: str, action: str, req: LifecycleRequest, tenant: str | None = None
) -> OperationReply:
    """`change` in a unit of work of its own."""
    async with store.operation() as work:
        return await change(work, source, action, req, tenant)


async def remove_workload(
    ops_ctx: container_ops.OnStore, req: LifecycleRequest, tenant: str | None = None
) -> OperationReply:
    """Remove every live container of `req.workload` (`container_ops.remove`: resources return when agents confirm)."""
    if req.workload is None:
        raise InvalidInput("workload", "remove-workload removes a workload: name it (containers: eru container rm)")
    async with ops_ctx.operations.operation() as work:
        ids = await workload_containers(work, req, tenant)
    reply = await container_ops.remove(
        ops_ctx, RemoveRequest(container_ids=ids, reason=req.reason or "workload removed")
    )
    message = reply.message.replace("container(s)", f"container(s) of workload {req.workload}")
    return reply.model_copy(update={"message": message})
