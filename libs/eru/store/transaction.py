"""Transactions, advisory locks, the transactional outbox and the idempotent-consumer inbox.

Everything here that takes a connection works inside the caller's transaction, so the state change, its lock, its
outgoing events and its inbox mark commit together or not at all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from eru.errors import EruError

OUTBOX_CHANNEL = "eru_outbox"
# A plain connection or one borrowed from a pool: every helper here accepts both.
Connection: TypeAlias = asyncpg.Connection | PoolConnectionProxy
IsolationLevel = Literal["read_committed", "repeatable_read", "serializable"]


class NotInTransaction(EruError):
    """A helper whose effect lasts until commit was called on a connection outside a transaction."""

    code = "not_in_transaction"


@asynccontextmanager
async def transaction(pool: asyncpg.Pool, *, isolation: IsolationLevel = "read_committed") -> AsyncIterator[Connection]:
    """A pooled connection inside a transaction: committed when the block ends, rolled back if it raises."""
    async with pool.acquire() as conn, conn.transaction(isolation=isolation):
        yield conn


def _require_transaction(conn: Connection, what: str) -> None:
    if not conn.is_in_transaction():
        raise NotInTransaction(f"{what} needs a transaction: its effect would end with the statement otherwise")


# ------------------------------------------------------------------------------------------------- advisory locks
def advisory_key(name: str) -> int:
    """A signed 64-bit lock key for `name`: the first 8 bytes of blake2b(name), the same in every process."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def pod_lock_key(pod: str) -> int:
    """The advisory key that serialises allocation in one pod (docs/pipeline.md)."""
    return advisory_key(f"eru.pod:{pod}")


async def advisory_xact_lock(conn: Connection, key: str) -> None:
    """Wait for the transaction-level advisory lock named `key`; it is released when the transaction ends.

    Cluster-wide within the database, so it excludes other connections, processes and replicas alike.
    """
    _require_transaction(conn, "advisory_xact_lock")
    await conn.execute("SELECT pg_advisory_xact_lock($1)", advisory_key(key))


async def try_advisory_xact_lock(conn: Connection, key: str) -> bool:
    """Take the transaction-level advisory lock named `key` if it is free; False (without waiting) if it is held."""
    _require_transaction(conn, "try_advisory_xact_lock")
    taken: bool = await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", advisory_key(key))
    return taken


async def lock_pod(conn: Connection, pod: str) -> None:
    """Hold the pod's allocation lock until the current transaction ends."""
    _require_transaction(conn, "lock_pod")
    await conn.execute("SELECT pg_advisory_xact_lock($1)", pod_lock_key(pod))


# ------------------------------------------------------------------------------------------------------- outbox
@dataclass(frozen=True)
class OutboxMessage:
    """One outbox row: publish `body` on `subject` with `headers`, message id = `event_id`."""

    id: int
    event_id: str
    subject: str
    headers: Mapping[str, str]
    body: bytes
    created_at: datetime


async def add_to_outbox(
    conn: Connection, *, event_id: str, subject: str, body: bytes, headers: Mapping[str, str] | None = None
) -> int | None:
    """Queue one message within the caller's transaction; returns its row id, or None if `event_id` is already there.

    Relays listening on `OUTBOX_CHANNEL` are woken when the transaction commits (a trigger sends the NOTIFY).
    """
    _require_transaction(conn, "add_to_outbox")
    row_id: int | None = await conn.fetchval(
        """
        INSERT INTO outbox (event_id, subject, headers, body) VALUES ($1, $2, $3::jsonb, $4)
        ON CONFLICT (event_id) DO NOTHING
        RETURNING id
        """,
        event_id,
        subject,
        json.dumps(dict(headers or {})),
        body,
    )
    return row_id


def outbox_message(row: asyncpg.Record) -> OutboxMessage:
    """An outbox row as claimed (id, event_id, subject, headers as JSON text, body, created_at)."""
    return OutboxMessage(
        id=row["id"],
        event_id=row["event_id"],
        subject=row["subject"],
        headers=json.loads(row["headers"]),
        body=bytes(row["body"]),
        created_at=row["created_at"],
    )


async def claim_outbox(conn: Connection, limit: int) -> list[OutboxMessage]:
    """Take up to `limit` unpublished rows, oldest first, and mark them published — all within the caller's transaction.

    Rows are locked `FOR UPDATE SKIP LOCKED`, so concurrent claimers get disjoint rows; a row held for the process
    that inserted it (`held_until` ahead, docs/store.md "Publishing after the commit") waits until its hold passes.
    Publish them before the transaction commits: if publishing fails, roll back and the rows become claimable again
    (at-least-once).
    """
    _require_transaction(conn, "claim_outbox")
    rows = await conn.fetch(
        """
        UPDATE outbox SET published_at = now()
         WHERE id IN (
               SELECT id FROM outbox
                WHERE published_at IS NULL AND (held_until IS NULL OR held_until <= now())
                ORDER BY id
                LIMIT $1
                  FOR UPDATE SKIP LOCKED)
        RETURNING id, event_id, subject, headers, body, created_at
        """,
        limit,
    )
    messages = [outbox_message(row) for row in rows]
    return sorted(messages, key=lambda message: message.id)


async def prune_outbox(conn: Connection, older_than_seconds: float) -> int:
    """Delete rows published more than `older_than_seconds` ago; returns how many were deleted."""
    status: str = await conn.execute(
        "DELETE FROM outbox WHERE published_at < now() - make_interval(secs => $1)", float(older_than_seconds)
    )
    return int(status.rsplit(" ", 1)[-1])


# -------------------------------------------------------------------------------------------------------- inbox
async def seen_before(conn: Connection, consumer: str, message_id: str) -> bool:
    """Record that `consumer` processes `message_id`; True if it already had (skip the message then).

    Call it inside the transaction that applies the message's effect: a rollback forgets the mark with the effect.
    A concurrent duplicate waits on the first one's row lock and sees True once that commits.
    """
    _require_transaction(conn, "seen_before")
    inserted = await conn.fetchval(
        """
        INSERT INTO inbox (consumer, message_id) VALUES ($1, $2)
        ON CONFLICT (consumer, message_id) DO NOTHING
        RETURNING true
        """,
        consumer,
        message_id,
    )
    return inserted is None


async def prune_inbox(conn: Connection, older_than_seconds: float) -> int:
    """Forget inbox marks older than `older_than_seconds` (past any possible redelivery); returns how many."""
    status: str = await conn.execute(
        "DELETE FROM inbox WHERE processed_at < now() - make_interval(secs => $1)", float(older_than_seconds)
    )
    return int(status.rsplit(" ", 1)[-1])
