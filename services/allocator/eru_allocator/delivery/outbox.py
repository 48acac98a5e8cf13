"""The allocator's side of the transactional outbox: queue typed messages in a transaction, relay them to JetStream.

Every command and event the allocator emits is written with the state change that causes it (`queue`), and the relay
publishes committed rows with `Nats-Msg-Id` = event id (JetStream deduplicates a repeat). Rows are claimed with
`FOR UPDATE SKIP LOCKED`, so every replica relays in parallel without publishing a row twice at the same time; a
replica that dies after publishing but before committing leaves the rows to be published again (at least once, never
lost). The relay sleeps on `LISTEN eru_outbox` between bursts, with a slow poll as a safety net.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg
import structlog
from nats.aio.client import Client
from nats.js import JetStreamContext
from pydantic import BaseModel

from eru.bus import Envelope, encode
from eru.bus.codec import MSGPACK
from eru.bus.envelope import H_CONTENT_TYPE, H_MSG_ID
from eru.bus.subjects import tenant_deploy_event
from eru.fairness.ledger import parent_of
from eru.store import OUTBOX_CHANNEL, add_to_outbox, transaction
from eru.store.transaction import Connection, OutboxMessage, outbox_message
from eru_allocator.flow.until_set import until_set

log = structlog.get_logger()
PUBLISH_TIMEOUT_SECONDS = 10.0
STANDBY_BATCH = 50  # rows a relay that does not lead claims per poll (docs/replicas.md "One replica relays")


async def queue(conn: Connection, subject: str, model: BaseModel, envelope: Envelope) -> None:
    """Add `model` to the outbox within the caller's transaction; published after commit with id = `envelope.id`."""
    headers = {**envelope.to_headers(), H_CONTENT_TYPE: MSGPACK}
    await add_to_outbox(conn, event_id=envelope.id, subject=subject, body=encode(model), headers=headers)


def _deploy_event_id(subject: str) -> str | None:
    """The deploy id of a deploy event subject (`eru.deploy.<id>.<event>`), None for anything else."""
    parts = subject.split(".")
    return parts[2] if len(parts) == 4 and parts[0] == "eru" and parts[1] == "deploy" else None


# `claim_outbox` (eru.store) and the tenant of each claimed deploy event in one statement: the relay's transaction is
# BEGIN, this, the publishes, COMMIT (the tenant lookup was one more round trip before COMMIT, per batch).
CLAIM_SQL = """
WITH claimed AS (
    UPDATE outbox SET published_at = now()
     WHERE id IN (
           SELECT id FROM outbox
            WHERE published_at IS NULL AND (held_until IS NULL OR held_until <= now())
            ORDER BY id
            LIMIT $1
              FOR UPDATE SKIP LOCKED)
    RETURNING id, event_id, subject, headers, body, created_at
)
SELECT c.id, c.event_id, c.subject, c.headers, c.body, c.created_at, d.tenant
  FROM claimed AS c
  LEFT JOIN deploys AS d ON $2 AND c.subject LIKE 'eru.deploy.%' AND d.id = split_part(c.subject, '.', 3)
 ORDER BY c.id
"""


async def claim(conn: Connection, batch: int, *, tenants: bool) -> tuple[list[OutboxMessage], dict[str, str]]:
    """Claim up to `batch` rows like `eru.store.claim_outbox` (oldest first, `SKIP LOCKED`, inside the caller's
    transaction); with `tenants`, also each claimed deploy event's tenant (a group's events: its parent tenant's),
    by deploy id."""
    rows = await conn.fetch(CLAIM_SQL, batch, tenants)
    messages = [outbox_message(row) for row in rows]
    owners: dict[str, str] = {}
    for row in rows:
        deploy_id = _deploy_event_id(row["subject"])
        if row["tenant"] is not None and deploy_id is not None:
            owners[deploy_id] = parent_of(row["tenant"])
    return messages, owners


async def relay_once(pool: asyncpg.Pool, js: JetStreamContext, batch: int, nc: Client | None = None) -> int:
    """Publish one batch of committed rows and mark them; returns how many were published (0 = nothing pending).

    With `nc`, each deploy event is also sent (core NATS, not stored) to its tenant's subject
    `eru.t.<tenant>.deploy.<id>.<event>`, the only deploy events a tenant's client may read (docs/security.md)."""
    async with transaction(pool) as conn:
        messages, tenants = await claim(conn, batch, tenants=nc is not None)
        if not messages:
            return 0
        acks = []
        for message in messages:
            headers = {**message.headers, H_MSG_ID: message.event_id}
            acks.append(await js.publish_async(message.subject, message.body, headers=headers))
        # Every publish must be stored before the rows count as published; a failure rolls the claim back.
        await asyncio.wait_for(asyncio.gather(*acks), timeout=PUBLISH_TIMEOUT_SECONDS)
    for message in messages:
        deploy_id = _deploy_event_id(message.subject)
        tenant = tenants.get(deploy_id or "")
        if tenant is not None and nc is not None:  # owners are read only with `nc`
            with contextlib.suppress(Exception):  # a copy for watchers: the stored event is the record
                event = message.subject.rsplit(".", 1)[1]
                copy = tenant_deploy_event(tenant, deploy_id or "", event)
                await nc.publish(copy, message.body, headers=dict(message.headers))
    return len(messages)


async def run_relay(
    pool: asyncpg.Pool,
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
    wake = asyncio.Event()

    def on_notify(*_args: Any) -> None:
        wake.set()

    listener = await pool.acquire()
    await listener.add_listener(OUTBOX_CHANNEL, on_notify)
    try:
        while not stopping.is_set():
            wake.clear()
            leading = eager is None or eager()
            try:
                # standing by, a few rows: the rows a claim holds wait for it, and a replica starved of CPU holding
                # hundreds would hold back commands the lead would have sent at once
                sent = await relay_once(pool, js, batch if leading else min(batch, STANDBY_BATCH), nc)
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
            while await relay_once(pool, js, batch, nc) > 0:
                pass
    finally:
        with contextlib.suppress(Exception):
            await listener.remove_listener(OUTBOX_CHANNEL, on_notify)
        await pool.release(listener)


async def _standby(seconds: float, stopping: asyncio.Event, woken: asyncio.Event | None) -> None:
    """Wait `seconds`, or until stopping or `woken` (cleared: it wakes the next wait only when set again)."""
    try:
        await until_set(seconds, *([stopping] if woken is None else [stopping, woken]))
    finally:
        if woken is not None:
            woken.clear()


QUEUE_SQL = """
INSERT INTO outbox (event_id, subject, headers, body)
SELECT event_id, subject, headers::jsonb, body FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[])
    WITH ORDINALITY AS queued (event_id, subject, headers, body, position)
 ORDER BY position
ON CONFLICT (event_id) DO NOTHING
"""


async def queue_many(conn: Connection, messages: Sequence[tuple[str, BaseModel, Envelope]]) -> None:
    """`queue` for many messages in ONE statement (a deploy of 100 containers queues 100 commands): one round trip,
    one statement for PostgreSQL to run (and one `NOTIFY`), the rows' ids in the order of `messages`."""
    if not messages:
        return
    await conn.execute(QUEUE_SQL, *queue_columns(messages))


def queue_columns(messages: Sequence[tuple[str, BaseModel, Envelope]]) -> list[list[Any]]:
    """The four column arrays of `QUEUE_SQL` (event ids, subjects, headers, bodies), in the order of `messages`."""
    event_ids: list[Any] = []
    subjects: list[Any] = []
    headers: list[Any] = []
    bodies: list[Any] = []
    for subject, model, envelope in messages:
        event_ids.append(envelope.id)
        subjects.append(subject)
        headers.append(json.dumps({**envelope.to_headers(), H_CONTENT_TYPE: MSGPACK}))
        bodies.append(encode(model))
    return [event_ids, subjects, headers, bodies]
