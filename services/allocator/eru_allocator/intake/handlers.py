"""Deploy requests as they arrive (docs/pipeline.md, docs/replicas.md): planned here when this replica leases the
request's pod, else routed to the partition that does; a tenant's request scoped to the tenant its subject names
(docs/security.md); the message kept in progress while it waits behind its pod's batch.

`app.Allocator` holds one `DeployIntake`; its deploy consumers call the `on_*` handlers.
"""

from __future__ import annotations

import structlog
from nats.aio.client import Client

from eru.bus import Delivery, Envelope, reply_to_delivery
from eru.bus.subjects import origin_subject, tenant_of
from eru.domain import Accepted, DeployRequest
from eru.errors import EruError, InvalidInput
from eru.store.delivery import SettledStore
from eru_allocator.delivery.settled import request_key
from eru_allocator.deploy.context import Context, Item
from eru_allocator.deploy.pipeline import deploy
from eru_allocator.flow.batcher import Batcher
from eru_allocator.flow.in_progress import InProgress
from eru_allocator.intake.routing import Partitions
from eru_allocator.operations import tenant_scope

log = structlog.get_logger()


class DeployIntake:
    """Deploy request handlers over the deploy path the allocator builds."""

    def __init__(
        self,
        settled: SettledStore,
        nc: Client,
        source: str,
        partitions: Partitions,
        deploy_ctx: Context,
        batcher: Batcher[Item, Accepted | EruError],
        in_progress: InProgress,
    ) -> None:
        self.settled = settled
        self.nc = nc
        self.source = source
        self.partitions = partitions
        self.deploy_ctx = deploy_ctx
        self.batcher = batcher
        self.in_progress = in_progress

    async def on_deploy(self, request: DeployRequest, envelope: Envelope, delivery: Delivery) -> None:
        """A request from `eru.deploy.request`: planned here if this replica leases its pod, else routed."""
        if not self.partitions.plans_here(request.pod, delivery):
            await self.partitions.route(request.pod, delivery, envelope)
            return
        await self._plan(request, envelope, delivery)

    async def on_routed_deploy(self, request: DeployRequest, envelope: Envelope, delivery: Delivery) -> None:
        """A request another replica routed to a partition this one leases; scoped as its origin subject says."""
        origin = origin_subject(delivery.subject, delivery.headers)
        self.partitions.planned(request.pod)
        if tenant_of(origin) is not None:
            await self._plan_tenant(request, envelope, delivery, origin)
        else:
            await self._plan(request, envelope, delivery)

    async def _plan(self, request: DeployRequest, envelope: Envelope, delivery: Delivery) -> None:
        if delivery.redriven:
            # an operator re-submitted it from the dead letters: it may deploy now, unless it already did
            await self.settled.forget_dead_letter(request_key(request, envelope))
        # in progress every third of ack_wait: it may queue behind a busy pod's batches for longer than ack_wait
        answer: Accepted | EruError = await self.in_progress.around(
            deploy(self.deploy_ctx, request, envelope, self.batcher), delivery
        )
        if isinstance(answer, EruError):
            log.warning("deploy.rejected", code=answer.code, reason=answer.message, pod=request.pod)
        await reply_to_delivery(self.nc, delivery, envelope, answer, source=self.source)

    async def on_tenant_deploy(self, request: DeployRequest, envelope: Envelope, delivery: Delivery) -> None:
        """A tenant's deploy (`eru.t.<tenant>.deploy.request`): its tenant is the subject's (docs/security.md)."""
        tenant_of(delivery.subject)  # a subject that names no valid tenant is refused here, never routed
        if not self.partitions.plans_here(request.pod, delivery):
            await self.partitions.route(request.pod, delivery, envelope)
            return
        await self._plan_tenant(request, envelope, delivery, delivery.subject)

    async def _plan_tenant(self, request: DeployRequest, envelope: Envelope, delivery: Delivery, subject: str) -> None:
        tenant = tenant_of(subject)
        try:
            if tenant is None:
                raise InvalidInput("subject", f"{subject!r} names no tenant")
            scoped = tenant_scope.scope_deploy(request, tenant)
        except EruError as error:
            log.warning("deploy.rejected", code=error.code, reason=error.message, subject=subject)
            await reply_to_delivery(self.nc, delivery, envelope, error, source=self.source)
            return
        await self._plan(scoped, envelope, delivery)
