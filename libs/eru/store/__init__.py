"""eru's store: PostgreSQL over asyncpg — pool, migrations, transactions, advisory locks, outbox and inbox.

See docs/store.md for the schema and the locking rules.
"""

from eru.store.migrate import MigrationError, apply_migrations, load_migrations
from eru.store.pool import StoreUnavailable, check_database, connect, create_pool, redact_dsn
from eru.store.transaction import (
    OUTBOX_CHANNEL,
    NotInTransaction,
    OutboxMessage,
    add_to_outbox,
    advisory_key,
    advisory_xact_lock,
    claim_outbox,
    lock_pod,
    pod_lock_key,
    prune_inbox,
    prune_outbox,
    seen_before,
    transaction,
    try_advisory_xact_lock,
)

__all__ = [
    "OUTBOX_CHANNEL",
    "MigrationError",
    "NotInTransaction",
    "OutboxMessage",
    "StoreUnavailable",
    "add_to_outbox",
    "advisory_key",
    "advisory_xact_lock",
    "apply_migrations",
    "check_database",
    "claim_outbox",
    "connect",
    "create_pool",
    "load_migrations",
    "lock_pod",
    "pod_lock_key",
    "prune_inbox",
    "prune_outbox",
    "redact_dsn",
    "seen_before",
    "transaction",
    "try_advisory_xact_lock",
]
