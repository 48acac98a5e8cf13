"""The lifecycle verbs on the bus: `eru.allocator.{stop,start,restart,dissociate,remove-workload}` for operators
(answered once per request id: `settled.ONCE_OPERATIONS`) and `eru.t.<tenant>.allocator.…` for tenants, confined
to the subject's tenant (docs/security.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel

from eru.bus import Envelope
from eru.bus.subjects import LIFECYCLE_OPERATIONS, allocator_operation, tenant_of
from eru.domain.messages import LifecycleRequest, OperationReply
from eru_allocator.delivery.settled import at_most_once
from eru_allocator.operations import containers as container_ops
from eru_allocator.operations.tenant_scope import check_owned
from eru_allocator.operations.workloads.ops import act, remove_workload

Serve = Callable[[str, type[Any], Callable[[Any], Awaitable[BaseModel]]], Awaitable[None]]


def _run(ops_ctx: container_ops.OpsContext, name: str, req: LifecycleRequest, tenant: str | None) -> Awaitable[Any]:
    if name == "remove-workload":
        return remove_workload(ops_ctx, req, tenant)
    return act(ops_ctx.operations, ops_ctx.source, name, req, tenant)


async def serve_lifecycle(serve: Serve, ops_ctx: container_ops.OpsContext) -> None:
    """Answer the operators' lifecycle verbs (`Operations.serve`: in the queue group, once per request id)."""

    def handler(name: str) -> Callable[[Any], Awaitable[BaseModel]]:
        async def run(request: LifecycleRequest) -> BaseModel:
            reply: BaseModel = await _run(ops_ctx, name, request, None)
            return reply

        return run

    for name in LIFECYCLE_OPERATIONS:
        await serve(allocator_operation(name), LifecycleRequest, handler(name))


def tenant_handlers(ops_ctx: container_ops.OpsContext) -> dict[str, tuple[type[BaseModel], Any]]:
    """The tenants' lifecycle verbs for `tenant_scope.serve_tenant_operations`: a tenant names only its own
    containers or workloads (anybody else's, or an unknown one, is `permission_denied` before anything changes),
    answered once per request id like an operator's."""

    def handler(name: str) -> Any:
        async def respond(request: LifecycleRequest, envelope: Envelope, subject: str) -> BaseModel:
            tenant = tenant_of(subject)
            assert tenant is not None  # the wildcard subscription matches tenant subjects only
            if request.container_ids:
                await check_owned(ops_ctx.queries, tenant, list(request.container_ids))

            async def run() -> OperationReply:
                reply: OperationReply = await _run(ops_ctx, name, request, tenant)
                return reply

            return await at_most_once(ops_ctx.settled, f"{name}@{tenant}", envelope, run)

        return respond

    return {name: (LifecycleRequest, handler(name)) for name in LIFECYCLE_OPERATIONS}
