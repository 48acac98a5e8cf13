"""How long a request id's outcome is remembered, and dropping it after (docs/operations.md "How long a request id
is remembered").

`settled_requests` answers a request that comes again after its deploy left the live and history tables. It is
needed exactly as long as a stream can still deliver that request to the allocator:

* accepted: the deploy stream keeps the request for its max age (`min(events max age, retention)`), and a message
  not acked is redelivered up to `max_deliver` times, each attempt lasting at most `ack_wait` plus the store retry
  (a delivery kept in progress while the store is away);
* dead-lettered: the dead-letter stream keeps the letter for its max age (`max(retention, min(30 days,
  4 × retention))`) and a redrive puts it back on the deploy stream, where it lives the accepted window again.

The table is range-partitioned by `expires_at` (written on insert from `settle_windows`, which the allocator fills
from these figures at start); a partition is dropped whole once its range ended, recorded in `retention_drops`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from eru.store.retention import (
    GcReport,
    Partition,
    _create,
    _drop,
    _expire_default,
    bucket_seconds,
    partitions,
    partitions_to_create,
)
from eru.store.transaction import Connection

TABLE = "settled_requests"
COLUMN = "expires_at"
DAY = 86400.0


@dataclass(frozen=True)
class SettleWindows:
    """Seconds an outcome is kept after it was settled."""

    accepted_seconds: float
    dead_lettered_seconds: float


def settle_windows(
    *,
    deploy_stream_max_age: float,
    dead_letter_max_age: float,
    max_deliver: int,
    ack_wait_seconds: float,
    store_retry_seconds: float,
) -> SettleWindows:
    """The windows from the streams' ages and the deploy consumer's redelivery (pure)."""
    redelivery = max_deliver * (ack_wait_seconds + store_retry_seconds)
    accepted = deploy_stream_max_age + redelivery
    return SettleWindows(accepted, dead_letter_max_age + accepted)


def windows_for(settings: Any, max_deliver: int) -> SettleWindows:
    """The windows of a stack configured by `settings` (eru.settings.Settings; the allocator's deploy consumer
    redelivers up to `max_deliver` times)."""
    retention = float(settings.retention_seconds)
    return settle_windows(
        deploy_stream_max_age=min(float(settings.bus.events_max_age_seconds), retention),
        dead_letter_max_age=max(retention, min(30 * DAY, 4 * retention)),
        max_deliver=max_deliver,
        ack_wait_seconds=float(settings.allocator.ack_wait_seconds),
        store_retry_seconds=float(settings.store_retry_seconds),
    )


async def write_windows(conn: Connection, windows: SettleWindows) -> None:
    """Store the windows every later settle uses (one row)."""
    await conn.execute(
        """INSERT INTO settle_windows (accepted_seconds, dead_lettered_seconds) VALUES ($1, $2)
           ON CONFLICT (singleton) DO UPDATE SET accepted_seconds = EXCLUDED.accepted_seconds,
               dead_lettered_seconds = EXCLUDED.dead_lettered_seconds, updated_at = now()
           WHERE (settle_windows.accepted_seconds, settle_windows.dead_lettered_seconds)
                 IS DISTINCT FROM (EXCLUDED.accepted_seconds, EXCLUDED.dead_lettered_seconds)""",
        windows.accepted_seconds,
        windows.dead_lettered_seconds,
    )


async def read_windows(conn: Connection) -> SettleWindows:
    """The windows in force."""
    row = await conn.fetchrow("SELECT accepted_seconds, dead_lettered_seconds FROM settle_windows")
    if row is None:  # the migration writes the row; only a hand-deleted one is missing: the 7-day defaults
        return settle_windows(
            deploy_stream_max_age=7 * DAY,
            dead_letter_max_age=28 * DAY,
            max_deliver=5,
            ack_wait_seconds=30.0,
            store_retry_seconds=120.0,
        )
    return SettleWindows(float(row["accepted_seconds"]), float(row["dead_lettered_seconds"]))


def expired_partitions(existing: list[Partition], now: datetime) -> list[Partition]:
    """Partitions whose every row may be forgotten: their range ended (pure)."""
    return [p for p in existing if not p.is_default and p.range_to is not None and p.range_to <= now]


async def collect_settled(conn: Connection, now: datetime, report: GcReport) -> None:
    """Add partitions for the outcomes being settled now (until the accepted window plus a few buckets), drop the
    ones that ended, and forget what the default partition holds past its expiry; into `report`."""
    windows = await read_windows(conn)
    bucket = bucket_seconds(windows.accepted_seconds)
    existing = await partitions(conn, TABLE)
    default = next((p for p in existing if p.is_default), None)
    horizon = now + timedelta(seconds=windows.accepted_seconds)
    for start, end in partitions_to_create(existing, horizon, bucket, since=now):
        if report.dry_run:
            report.created.append(f"{TABLE}_p{int(start.timestamp())}")
            continue
        try:
            report.created.append(await _create(conn, TABLE, COLUMN, default.name if default else None, start, end))
        except Exception as error:  # lock timeout: busy table, next pass
            if "lock timeout" not in str(error):
                raise
            report.skipped.append(f"{TABLE}_p{int(start.timestamp())}")
            break
    for partition in expired_partitions(existing, now):
        entry = {"table": TABLE, "partition": partition.name, "range_to": partition.range_to}
        if report.dry_run:
            rows = int(await conn.fetchval(f"SELECT count(*) FROM {partition.name}"))
            report.dropped.append({**entry, "rows": rows})
            continue
        try:
            report.dropped.append({**entry, "rows": await _drop(conn, partition)})
        except Exception as error:  # lock timeout: busy table, next pass
            if "lock timeout" not in str(error):
                raise
            report.skipped.append(partition.name)
    if default is not None:
        report.default_rows_deleted[TABLE] = await _expire_default(conn, default, COLUMN, now, report.dry_run)
