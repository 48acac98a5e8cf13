"""The allocator's side of the transactional outbox: queue typed messages in a transaction, relay them to JetStream.

Every command and event the allocator emits is written with the state change that causes it (`queue`), and the relay
publishes committed rows with `Nats-Msg-Id` = event id (JetStream deduplicates a repeat). Rows are claimed with
`FOR UPDATE SKIP LOCKED`, so every replica relays in parallel without publishing a row twice at the same time; a
replica that dies after publishing but before committing leaves the rows to be published again (at least once, never
lost). The relay sleeps on `LISTEN eru_outbox` between bursts, with a slow poll as a safety net. It speaks the store's
delivery capability (`eru.store.delivery.OutboxRelayStore`: PostgreSQL's `PgDelivery`, or the in-memory store).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog
from nats.aio.client import Client
from nats.js import JetStreamContext

from eru.bus.envelope import H_MSG_ID
from eru.bus.subjects import tenant_deploy_event
from eru.store.delivery import OutboxRelayStore
from eru_allocator.flow.until_set import until_set
from eru_allocator.store.outbox import claim, deploy_event_id, queue, queue_columns, queue_many

__all__ = [  # the rows are queued and claimed in eru_allocator.store.outbox
    "PUBLISH_TIMEOUT_SECONDS",
    "STANDBY_BATCH",
    "claim",
    "queue",
    "queue_columns",
    "queue_many",
    "relay_once",
    "run_relay",
]

log = structlog.get_logger()
PUBLISH_TIMEOUT_SECONDS = 10.0
STANDBY_BATCH = 50  # rows a relay that does not lead claims per poll (docs/replicas.md "One replica relays")


async def relay_once(store: OutboxRelayStore, js: JetStreamContext, batch: int, nc: Client | None = None) -> int:
    """Publish one batch of committed rows and mark them; returns how many were published (0 = nothing pending).

    With `nc`, each deploy event is also sent (core NATS, not stored) to its tenant's subject
    `eru.t.<tenant>.deploy.<id>.<event>`, the only deploy events a tenant's client may read (docs/security.md)."""
    async with store.claim(batch, tenants=nc is not None) as claimed:
        messages, tenants = claimed.messages, claimed.tenants
        if not messages:
            return 0
        acks = []
        for message in messages:
            headers = {**message.headers, H_MSG_ID: message.event_id}
            acks.append(await js.publish_async(message.subject, message.body, headers=headers))
        # Every publish must be stored before the rows count as published; a failure rolls the claim back.
        await asyncio.wait_for(asyncio.gather(*acks), timeout=PUBLISH_TIMEOUT_SECONDS)
    for message in messages:
        deploy_id = deploy_event_id(message.subject)
        tenant = tenants.get(deploy_id or "")
        if tenant is not None and nc is not None:  # owners are read only with `nc`
            with contextlib.suppress(Exception):  # a copy for watchers: the stored event is the record
                event = message.subject.rsplit(".", 1)[1]
                copy = tenant_deploy_event(tenant, deploy_id or "", event)
                await nc.publish(copy, message.body, headers=dict(message.headers))
    return len(messages)


async def run_relay(
    store: OutboxRelayStore,
    js: JetStreamContext,
    stopping: asyncio.Event,
    *,
    batch: int = 500,
    poll_seconds: float = 1.0,
    nc: Client | None = None,
    eager: Callable[[], bool] | None = None,
    woken: asyncio.Event | None = None,
) -> None:
    """Relay until `stopping` is set, then relay what was committed before the stop.

    With `eager`, only while it says so does the relay wake on every commit and relay batch after batch; otherwise it
    relays at most `STANDBY_BATCH` rows per `poll_seconds`, the safety net for rows nobody else relays
    (docs/replicas.md "One replica relays": allocator replicas leave the outbox to the one leasing partition 0).
    `woken` (set when the replica gains partitions, maybe the lead's) ends a standby wait at once."""
    async with store.outbox_wakes() as wake:  # LISTEN eru_outbox on a connection of its own
        while not stopping.is_set():
            wake.clear()
            leading = eager is None or eager()
            try:
                # standing by, a few rows: the rows a claim holds wait for it, and a replica starved of CPU holding
                # hundreds would hold back commands the lead would have sent at once
                sent = await relay_once(store, js, batch if leading else min(batch, STANDBY_BATCH), nc)
            except Exception as error:  # a failed batch is rolled back and retried; the relay must keep going
                log.warning("outbox.relay_failed", error=f"{type(error).__name__}: {error}")
                sent = 0
                await asyncio.sleep(0.5)
            if not leading:
                await _standby(poll_seconds, stopping, woken)
                continue
            if sent:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), poll_seconds)
        with contextlib.suppress(Exception):
            while await relay_once(store, js, batch, nc) > 0:
                pass


async def _standby(seconds: float, stopping: asyncio.Event, woken: asyncio.Event | None) -> None:
    """Wait `seconds`, or until stopping or `woken` (cleared: it wakes the next wait only when set again)."""
    try:
        await until_set(seconds, *([stopping] if woken is None else [stopping, woken]))
    finally:
        if woken is not None:
            woken.clear()
