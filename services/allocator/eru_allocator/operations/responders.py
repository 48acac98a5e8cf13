"""The allocator's operations over request/reply (docs/pipeline.md "Operations"), in the queue group of every
replica: remove, replace, realloc, set-node, cordon, pod-create, query, reconcile, the tenant and reservation verbs,
and tenants' own scoped verbs. Operations that change state once per request (`settled.ONCE_OPERATIONS`) are answered
at most once per request id (`settled.at_most_once`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client
from pydantic import BaseModel

from eru.bus import Envelope, Server, serve
from eru.bus.subjects import allocator_operation
from eru.domain.inventory import ReconcileRequest
from eru.domain.messages import (
    CordonRequest,
    OperationReply,
    PodRequest,
    QueryRequest,
    ReallocRequest,
    RemoveRequest,
    ReplaceRequest,
    SetNodeRequest,
    WatermarkRequest,
)
from eru.nodeagent.metrics import inventory_stale_after
from eru.planning import PlanningConfig
from eru.reconcile import ReconcilePolicy
from eru.settings import Settings
from eru.store.nodes import NodeStore
from eru.store.tenants import TenantStore
from eru_allocator.containers.events import EventContext
from eru_allocator.delivery.settled import ONCE_OPERATIONS, at_most_once
from eru_allocator.nodes import registry, watermarks
from eru_allocator.nodes.reconciler import reconcile_request
from eru_allocator.operations import containers, tenant_scope
from eru_allocator.operations import reservations as reservation_ops
from eru_allocator.operations import tenants as tenant_ops
from eru_allocator.operations.realloc import realloc
from eru_allocator.operations.workloads.attach import serve_attach
from eru_allocator.operations.workloads.serve import serve_lifecycle

QUEUE_GROUP = "eru-allocator"


@dataclass
class Operations:
    """What the operations need from the replica, and the servers started for them."""

    nc: Client
    config: PlanningConfig
    source: str
    settings: Settings
    ops_ctx: containers.OpsContext
    event_ctx: EventContext
    reconcile_policy: ReconcilePolicy
    nodes: NodeStore
    tenants: TenantStore
    servers: list[Server] = field(default_factory=list)

    async def serve(self, subject: str, model: type[Any], handler: Callable[[Any], Awaitable[BaseModel]]) -> None:
        """Answer `subject` with `handler` in the allocators' queue group."""
        operation = subject.rsplit(".", 1)[-1]

        async def respond(request: Any, envelope: Envelope) -> BaseModel:
            if operation in ONCE_OPERATIONS:
                settled = self.ops_ctx.settled
                return await at_most_once(settled, operation, envelope, lambda: _operation_reply(handler(request)))
            reply: BaseModel = await handler(request)
            return reply

        server = await serve(
            self.nc,
            subject,
            model,
            respond,
            queue=QUEUE_GROUP,
            source=self.source,
            retry_seconds=self.settings.store_retry_seconds,
        )
        self.servers.append(server)


async def serve_operations(ops: Operations) -> list[Server]:
    """Start every operation's responder; returns the servers (stopped with the replica)."""
    await ops.serve(allocator_operation("remove"), RemoveRequest, lambda r: containers.remove(ops.ops_ctx, r))
    await ops.serve(allocator_operation("replace"), ReplaceRequest, lambda r: containers.replace(ops.ops_ctx, r))
    await ops.serve(
        allocator_operation("realloc"),
        ReallocRequest,
        lambda r: realloc(ops.ops_ctx.operations, ops.config, ops.source, r),
    )
    await serve_lifecycle(ops.serve, ops.ops_ctx)
    await ops.serve(allocator_operation("set-node"), SetNodeRequest, lambda r: registry.set_node(ops.nodes, r))
    await ops.serve(allocator_operation("cordon"), CordonRequest, lambda r: registry.cordon(ops.nodes, r))
    await ops.serve(allocator_operation("pod-create"), PodRequest, lambda r: registry.create_pod(ops.nodes, r))
    environment = ops.settings.eviction.model_dump(include={"watermarks", "pods", "nodes"})
    await ops.serve(
        allocator_operation("watermarks"),
        WatermarkRequest,
        lambda r: watermarks.set_watermarks(ops.ops_ctx.watermarks, environment, ops.source, r),
    )
    await ops.serve(
        allocator_operation("query"),
        QueryRequest,
        lambda r: containers.query(
            ops.ops_ctx.queries,
            r,
            ops.settings.allocator.node_down_after_seconds,
            watermarks=ops.ops_ctx.watermarks,
        ),
    )
    await ops.serve(
        allocator_operation("reconcile"),
        ReconcileRequest,
        lambda r: reconcile_request(
            ops.event_ctx, r, ops.reconcile_policy, inventory_stale_after(ops.settings.inventory_seconds)
        ),
    )
    await tenant_ops.serve_tenant_operations(
        ops.serve, ops.tenants, ops.config, ops.settings.allocator.node_down_after_seconds
    )
    await reservation_ops.serve_reservation_operations(ops.serve, ops.ops_ctx.operations, ops.config)
    ops.servers += await tenant_scope.serve_tenant_operations(
        ops.nc,
        ops.config,
        ops.ops_ctx,
        queue=QUEUE_GROUP,
        source=ops.source,
        down_after_seconds=ops.settings.allocator.node_down_after_seconds,
    )
    down = ops.settings.allocator.node_down_after_seconds  # `eru container logs|exec`, `eru run`: who and where
    ops.servers += await serve_attach(ops.nc, ops.ops_ctx.queries, queue=QUEUE_GROUP, source=ops.source, down=down)
    return ops.servers


async def _operation_reply(pending: Awaitable[BaseModel]) -> OperationReply:
    reply = await pending
    if not isinstance(reply, OperationReply):
        raise TypeError(f"expected an OperationReply, got {type(reply).__name__}")
    return reply
