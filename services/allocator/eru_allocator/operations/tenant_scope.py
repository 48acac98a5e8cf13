"""Requests of a tenant's client (docs/security.md): the tenant comes from the subject the request arrived on
(`eru.t.<tenant>.…`, which only that tenant's credentials may publish), never from the message.

A tenant may deploy for itself, and remove, realloc, replace, stop, start, restart, dissociate and query only its
own containers, workloads and deploys; naming anybody else's is a `permission_denied` error before anything changes
(a container's tenant never changes, so the check before the operation's own transaction cannot go stale).
"""

from __future__ import annotations

from typing import Any

from nats.aio.client import Client
from pydantic import BaseModel

from eru.bus import Envelope, Server, serve
from eru.bus.subjects import TENANT_OPERATIONS, TENANT_PREFIX, tenant_of
from eru.domain import DeployRequest
from eru.domain.messages import QueryRequest, ReallocRequest, RemoveRequest, ReplaceRequest
from eru.errors import PermissionDenied
from eru.fairness.ledger import parent_of
from eru.planning import PlanningConfig
from eru.store.queries import QueryStore
from eru_allocator.delivery.settled import scoped_request_id
from eru_allocator.operations import containers
from eru_allocator.operations.containers import OpsContext
from eru_allocator.operations.realloc import realloc

DEFAULT_TENANT = "default"


def owns(tenant: str, name: str | None) -> bool:
    """Whether `name` (a tenant or a group `tenant/group`) is `tenant`'s own."""
    return name is not None and parent_of(name) == tenant


def scope_deploy(request: DeployRequest, tenant: str) -> DeployRequest:
    """`request` as a deploy of `tenant` (or of one of its groups, `tenant/group`); a body naming another tenant is
    refused (field `workload.tenant`)."""
    named = request.workload.tenant
    if named != DEFAULT_TENANT and not owns(tenant, named):
        raise PermissionDenied(
            f"permission denied: workload.tenant: these credentials deploy for tenant {tenant!r}, not {named!r}",
            field="workload.tenant",
        )
    workload = request.workload.model_copy(update={"tenant": tenant if named == DEFAULT_TENANT else named})
    return request.model_copy(
        update={"workload": workload, "request_id": scoped_request_id(tenant, request.request_id)}
    )


async def check_owned(store: QueryStore, tenant: str, container_ids: list[str], field: str = "container_ids") -> None:
    """Raise `PermissionDenied` naming the first of `container_ids` that is not one of `tenant`'s containers
    (unknown ones included: a client learns nothing about containers that are not its own), read through the
    queries capability `store`."""
    owners = await store.container_tenants(container_ids)
    for index, container_id in enumerate(container_ids):
        if not owns(tenant, owners.get(container_id)):
            name = f"{field}[{index}]" if field == "container_ids" else field
            raise PermissionDenied(
                f"permission denied: {name}: {container_id!r} is not a container of tenant {tenant!r}",
                field=name,
                tenant=tenant,
            )


async def scope_query(store: QueryStore, tenant: str, request: QueryRequest) -> QueryRequest:
    """Check what a tenant may read: its containers, its deploys and the pod names; never nodes or decisions."""
    if request.what == "nodes":
        raise PermissionDenied(
            "permission denied: what: nodes are for operators; a tenant may query containers, deploys and pods"
        )
    if request.what == "watermarks":
        raise PermissionDenied(
            "permission denied: what: watermark overrides are for operators; a tenant may query containers, deploys"
            " and pods",
            field="what",
        )
    if request.what == "decision":
        # a decision's recorded input is the whole snapshot it was made on: every node, every tenant's holdings
        raise PermissionDenied(
            "permission denied: what: decisions record the whole cluster's state and are for operators; a tenant"
            " may query containers, deploys and pods",
            field="what",
        )
    if request.what == "deploy" and request.deploy_id is not None:
        row = await store.deploy_owner(request.deploy_id, scoped_request_id(tenant, request.deploy_id))
        if row is None or not owns(tenant, row.tenant):
            raise PermissionDenied(
                f"permission denied: deploy_id: {request.deploy_id!r} is not a deploy of tenant {tenant!r}",
                field="deploy_id",
            )
        return request.model_copy(update={"deploy_id": row.id})
    if request.what == "containers" and request.container_id is not None:
        await check_owned(store, tenant, [request.container_id], field="container_id")
    return request


async def serve_tenant_operations(
    nc: Client,
    config: PlanningConfig,
    ops_ctx: OpsContext,
    *,
    queue: str,
    source: str,
    down_after_seconds: float,
) -> list[Server]:
    """Answer `eru.t.*.allocator.<op>` for every op of `TENANT_OPERATIONS`, each confined to the subject's tenant
    (the lifecycle verbs: `workloads.serve`). Ownership and the queries are read through `ops_ctx.queries`."""
    store = ops_ctx.queries
    from eru_allocator.operations.workloads.serve import tenant_handlers  # imports check_owned from here

    def tenant(subject: str) -> str:
        found = tenant_of(subject)
        assert found is not None  # the wildcard subscription matches tenant subjects only
        return found

    async def remove(request: RemoveRequest, _envelope: Envelope, subject: str) -> BaseModel:
        await check_owned(store, tenant(subject), list(request.container_ids))
        return await containers.remove(ops_ctx, request)

    async def change(request: ReallocRequest, _envelope: Envelope, subject: str) -> BaseModel:
        await check_owned(store, tenant(subject), list(request.container_ids))
        return await realloc(ops_ctx.operations, config, source, request)

    async def replace(request: ReplaceRequest, _envelope: Envelope, subject: str) -> BaseModel:
        await check_owned(store, tenant(subject), [request.container_id], field="container_id")
        return await containers.replace(ops_ctx, request)

    async def query(request: QueryRequest, _envelope: Envelope, subject: str) -> BaseModel:
        owner = tenant(subject)
        scoped = await scope_query(store, owner, request)
        return await containers.query(store, scoped, down_after_seconds, owner, watermarks=ops_ctx.watermarks)

    handlers: dict[str, tuple[type[BaseModel], Any]] = {
        "remove": (RemoveRequest, remove),
        "realloc": (ReallocRequest, change),
        "replace": (ReplaceRequest, replace),
        "query": (QueryRequest, query),
        **tenant_handlers(ops_ctx),
    }
    servers = []
    for name in TENANT_OPERATIONS:
        model, handler = handlers[name]
        subject = f"{TENANT_PREFIX}.*.allocator.{name}"
        servers.append(await serve(nc, subject, model, handler, queue=queue, source=source, with_subject=True))
    return servers
