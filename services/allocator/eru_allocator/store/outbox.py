"""The outbox's rows (docs/pipeline.md "The outbox"): messages queued in the caller's transaction, published after it
commits, and a relay's claim of committed rows (`FOR UPDATE SKIP LOCKED`). The relay itself, which publishes what it
claimed, is `eru_allocator.delivery.outbox` (docs/allocator.md "The store seam").
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import asyncpg
from pydantic import BaseModel

from eru.bus import Envelope, encode
from eru.bus.codec import MSGPACK
from eru.bus.envelope import H_CONTENT_TYPE
from eru.fairness.ledger import parent_of
from eru.store import OUTBOX_CHANNEL, add_to_outbox
from eru.store.transaction import Connection, OutboxMessage, outbox_message


async def queue(conn: Connection, subject: str, model: BaseModel, envelope: Envelope) -> None:
    """Add `model` to the outbox within the caller's transaction; published after commit with id = `envelope.id`."""
    headers = {**envelope.to_headers(), H_CONTENT_TYPE: MSGPACK}
    await add_to_outbox(conn, event_id=envelope.id, subject=subject, body=encode(model), headers=headers)


def deploy_event_id(subject: str) -> str | None:
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
        deploy_id = deploy_event_id(row["subject"])
        if row["tenant"] is not None and deploy_id is not None:
            owners[deploy_id] = parent_of(row["tenant"])
    return messages, owners


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


# the rows whose acks came back, marked published in one statement (a relay that claims them meanwhile, after their
# hold, has marked them already)
MARK_SQL = """
UPDATE outbox SET published_at = now(), held_until = NULL
 WHERE event_id = ANY($1::text[]) AND published_at IS NULL
"""
# a failed publish: the rows are the relays' at once (woken at commit; this statement is its own transaction)
RELEASE_SQL = f"""
WITH released AS (
    UPDATE outbox SET held_until = NULL WHERE event_id = ANY($1::text[]) AND published_at IS NULL RETURNING 1
)
SELECT pg_notify('{OUTBOX_CHANNEL}', '') FROM (SELECT count(*) FROM released) AS counted
"""


async def mark_published(pool: asyncpg.Pool, event_ids: Sequence[str]) -> None:
    """Mark the held rows of `event_ids` published (by the process that committed them: docs/store.md "Publishing
    after the commit"); rows a relay published meanwhile are left as they are."""
    await pool.execute(MARK_SQL, list(event_ids))


async def release_held(pool: asyncpg.Pool, event_ids: Sequence[str]) -> None:
    """Release the hold of `event_ids`' unpublished rows and wake the relays: they publish them at once."""
    await pool.execute(RELEASE_SQL, list(event_ids))
