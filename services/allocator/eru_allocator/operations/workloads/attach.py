"""`eru.allocator.attach` and `eru.t.<tenant>.allocator.attach`: which node holds the container and whether the
caller may act on it, then the container's node agent is asked to stream (docs/node-agent.md "Logs and exec").

Clients never publish on node subjects: NATS permissions cannot tell one tenant's container from another's on
`eru.node.<node>.…`, so the allocator (which knows each container's tenant) checks and forwards the request, and the
agent streams straight to the caller's stream subject, `eru.t.<tenant>.attach.<session>` for a tenant (only its
credentials may read there) or `eru.attach.<session>` for an operator (docs/security.md "Logs and exec").
"""

from __future__ import annotations

from nats.aio.client import Client

from eru.bus import NoResponders, RequestTimeout, Server, request, serve
from eru.bus.subjects import TENANT_PREFIX, allocator_operation, attach_stream, node_attach, tenant_of
from eru.domain.attach import AgentAttach, AttachReply, AttachRequest
from eru.errors import EruError, NotFound
from eru.store.queries import QueryStore
from eru_allocator.containers.lifecycle import GONE_STATES
from eru_allocator.operations.tenant_scope import check_owned

AGENT_TIMEOUT_SECONDS = 10.0
NOT_ON_A_NODE = frozenset({"planned", "creating"})


async def locate(store: QueryStore, container_id: str, down_after_seconds: float) -> str:
    """The node that runs `container_id` (read through the queries capability `store`); `NotFound` when it is
    unknown or gone, `unavailable` when its node is down or it is not on a node yet."""
    row = await store.container_place(container_id, down_after_seconds)
    if row is None:
        raise NotFound("container_id", f"unknown container {container_id!r}")
    if row.state in GONE_STATES:
        raise NotFound("container_id", f"container {container_id!r} is {row.state}: nothing of it runs any more")
    if row.node is None or row.state in NOT_ON_A_NODE:
        raise EruError(f"container {container_id!r} is {row.state}, not started on a node yet", code="unavailable")
    if row.silent:
        raise EruError(
            f"container {container_id!r} is on node {row.node}, which is down (no heartbeat for "
            f"{row.silent_seconds or 0.0:.0f}s, the limit is {down_after_seconds:g}s)",
            code="unavailable",
            node=row.node,
        )
    return str(row.node)


async def attach(
    nc: Client, store: QueryStore, attach_request: AttachRequest, tenant: str | None, *, source: str, down: float
) -> AttachReply:
    """Check, locate, and ask the container's node agent to stream to the caller's stream subject."""
    if tenant is not None:
        await check_owned(store, tenant, [attach_request.container_id], field="container_id")
    node = await locate(store, attach_request.container_id, down)
    forward = AgentAttach(**attach_request.model_dump(), subject=attach_stream(tenant, attach_request.session))
    try:
        return await request(nc, node_attach(node), forward, AttachReply, AGENT_TIMEOUT_SECONDS, source=source)
    except (NoResponders, RequestTimeout):
        raise EruError(
            f"the agent of node {node} (which runs {attach_request.container_id!r}) does not answer",
            code="unavailable",
            node=node,
        ) from None


async def serve_attach(nc: Client, store: QueryStore, *, queue: str, source: str, down: float) -> list[Server]:
    """Answer the operators' `eru.allocator.attach` and every tenant's `eru.t.<tenant>.allocator.attach`."""

    async def operator(req: AttachRequest, _envelope: object) -> AttachReply:
        return await attach(nc, store, req, None, source=source, down=down)

    async def tenant(req: AttachRequest, _envelope: object, subject: str) -> AttachReply:
        return await attach(nc, store, req, tenant_of(subject), source=source, down=down)

    return [
        await serve(nc, allocator_operation("attach"), AttachRequest, operator, queue=queue, source=source),
        await serve(
            nc,
            f"{TENANT_PREFIX}.*.allocator.attach",
            AttachRequest,
            tenant,
            queue=queue,
            source=source,
            with_subject=True,
        ),
    ]
