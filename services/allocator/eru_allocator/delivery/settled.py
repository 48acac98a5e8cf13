"""Settled deploy requests (docs/store.md "Settled requests"): what a replayed or redelivered request is answered,
and the record of a request that was dead-lettered, so that a replay of the stream never deploys it. Both go through
the store's settled requests (`eru.store.delivery.SettledStore`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from eru.bus import Envelope, new_envelope, new_id, publish
from eru.bus.consumer import Consumer, Delivery, Failure
from eru.bus.subjects import LIFECYCLE_OPERATIONS, deploy_event, origin_subject, tenant_of
from eru.domain import DeployEvent, DeployRequest, ErrorReply
from eru.domain.messages import OperationReply
from eru.store.delivery import SettledStore
from eru.store.protocol import StoredDeploy

log = structlog.get_logger()


def scoped_request_id(tenant: str, request_id: str | None) -> str | None:
    """A tenant's idempotency key in the one key space of all deploys: `<tenant>/<request_id>`, so that a client
    can neither collide with nor learn about another tenant's requests."""
    return None if request_id is None else f"{tenant}/{request_id}"


def is_fresh_retry(found: StoredDeploy, envelope: Envelope) -> bool:
    """True when `found` says the request was dead-lettered with another message than this one: a client's new
    attempt (same request id, new message), which is planned; a replay of the dead-lettered message itself is not."""
    return found.status == "settled:dead_lettered" and found.message_id not in (None, envelope.id)


def request_key(request: DeployRequest, envelope: Envelope) -> str:
    """The idempotency key of a deploy request: the client's `request_id`, else the message's envelope id."""
    return request.request_id or envelope.id


def dead_letter_key(subject: str, request: DeployRequest, envelope: Envelope) -> str:
    """The key a dead-lettered deploy request that arrived on `subject` is settled under: the one its successful
    path uses, `<tenant>/<request_id>` for a tenant's subject (docs/security.md), else `request_key`."""
    tenant = tenant_of(subject)
    if tenant is not None and request.request_id is not None:
        return scoped_request_id(tenant, request.request_id) or envelope.id
    return request_key(request, envelope)


class DeployConsumer(Consumer[DeployRequest]):
    """The deploy-request consumer: a dead-lettered request is recorded as settled (a replay never deploys it), and
    one that gave up on an unreachable store publishes a `failed` deploy event."""

    def __init__(self, *args: Any, store: SettledStore, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.store = store

    async def on_dead_letter(
        self, delivery: Delivery, model: DeployRequest | None, envelope: Envelope | None, failure: Failure
    ) -> None:
        if model is None or envelope is None:
            return  # it never decoded: a replay is rejected again, it can never deploy
        if failure.code == "store_unavailable":
            await self._publish_failed(envelope, failure)
        key = dead_letter_key(origin_subject(delivery.subject, delivery.headers), model, envelope)
        await self.store.record_dead_letter(key, failure.reason[:1000], envelope.id)

    async def _publish_failed(self, cause: Envelope, failure: Failure) -> None:
        deploy_id = new_id()
        error = ErrorReply(code=failure.code, message=failure.message or failure.reason)
        event = DeployEvent(deploy_id=deploy_id, kind="failed", error=error)
        envelope = new_envelope("eru.deploy.failed", self.source, correlation_id=deploy_id, causation=cause)
        await publish(self.js, deploy_event(deploy_id, "failed"), event, envelope)
        log.warning("deploy.failed", deploy_id=deploy_id, code=failure.code, reason=failure.reason)


ONCE_OPERATIONS = frozenset({"remove", "realloc", "replace", *LIFECYCLE_OPERATIONS})


async def at_most_once(
    store: SettledStore,
    operation: str,
    envelope: Envelope,
    run: Callable[[], Awaitable[OperationReply]],
) -> OperationReply:
    """Run a remove, realloc or replace once per request envelope id: a client that resends the same request (same
    `ce-id`) gets the first answer back instead of a second effect (a realloc adds deltas, so twice would be wrong).
    `store`: the settled requests (`eru.store.delivery.SettledStore`)."""
    key = f"{operation}:{envelope.id}"
    stored = await store.operation_answer(key)
    if stored is not None:
        return OperationReply.model_validate_json(stored)
    reply = await run()
    await store.record_operation(key, operation, reply.model_dump_json())
    return reply
