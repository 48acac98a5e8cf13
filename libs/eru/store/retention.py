"""Retention of finished records in PostgreSQL, with PostgreSQL's own tools (docs/store.md "Retention").

* Finished containers (removed, failed, lost) and ended deploys move from the live tables into `containers_history` and
  `deploys_history` after `grace_seconds` (a deploy once none of its containers is left live): one
  `DELETE … RETURNING` feeding an `INSERT` per batch, rows picked `FOR UPDATE SKIP LOCKED`, so the mover never waits
  for (or deadlocks with) the allocator. The live tables stay the size of what runs.
* `decisions`, `containers_history` and `deploys_history` are partitioned by time (range partitions of
  `bucket_seconds(retention)`, created ahead of time). A partition is dropped whole once everything in it is older
  than the retention — no row-by-row delete, no bloat, no vacuum debt — and recorded in `retention_drops`, so a
  lookup past retention can say when its record expired (`expired_at`).
* Partition DDL runs with a short `lock_timeout`: if the table is busy it is tried again on the next pass rather
  than queueing inserts behind it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from eru.store.transaction import Connection, advisory_key

PARTITIONED = {
    "decisions": "created_at",
    "decision_snapshots": "created_at",  # written with the decisions that refer to it (migration 0125)
    "containers_history": "finished_at",
    "deploys_history": "finished_at",
}
# Partitions kept this many partition widths longer than the retention: a decision's snapshot is written with it, but
# the two tables' partition boundaries need not line up (`decisions` of a database migrated with decisions in it
# starts at the migration's moment), so a snapshot dropped with its own partition would leave a live decision
# without its input for up to one width.
# And one more: a snapshot row may be a change of a full one written up to `MAX_BASE_AGE` (30 s, under the narrowest
# width) before it (eru.planning.decision_record.SnapshotChain), which must outlive the change's decisions too.
LONGER = {"decision_snapshots": 2}
GC_LOCK = "eru.retention"
DDL_LOCK_TIMEOUT = "300ms"  # a drop that would wait longer for the table is retried on the next pass
AHEAD_BUCKETS = 3
MOVE_BATCH = 2000
# Tables `eru status` and `eru gc` report on (a partitioned table counts all its partitions).
REPORTED_TABLES = (
    "containers",
    "deploys",
    "decisions",
    "decision_snapshots",
    "containers_history",
    "deploys_history",
    "outbox",
    "inbox",
    "deploy_waits",
    "nodes",
    "retention_drops",
    "settled_requests",
)

MOVE_CONTAINERS_SQL = """
WITH picked AS (
    SELECT c.id FROM containers c
     WHERE c.state IN ('removed', 'failed', 'lost') AND c.updated_at < $1
       AND NOT EXISTS (SELECT 1 FROM deploys d WHERE d.id = c.deploy_id AND d.status IN ('planned', 'waiting'))
       AND NOT EXISTS (SELECT 1 FROM containers r
                        WHERE r.replaces = c.id AND r.state NOT IN ('removed', 'failed', 'lost'))
     ORDER BY c.id LIMIT $2 FOR UPDATE OF c SKIP LOCKED
), moved AS (
    DELETE FROM containers c USING picked WHERE c.id = picked.id RETURNING c.*
)
INSERT INTO containers_history (id, deploy_id, node, pod, state, finished_at, record)
SELECT id, deploy_id, node, pod, state, updated_at, to_jsonb(moved) FROM moved
"""
MOVE_DEPLOYS_SQL = """
WITH picked AS (
    SELECT d.id FROM deploys d
     WHERE d.status NOT IN ('planned', 'waiting') AND d.updated_at < $1
       AND NOT EXISTS (SELECT 1 FROM containers c WHERE c.deploy_id = d.id)
       AND NOT EXISTS (SELECT 1 FROM deploy_waits w WHERE w.deploy_id = d.id)
     ORDER BY d.id LIMIT $2 FOR UPDATE OF d SKIP LOCKED
), moved AS (
    DELETE FROM deploys d USING picked WHERE d.id = picked.id RETURNING d.*
)
INSERT INTO deploys_history (id, request_id, pod, tenant, status, finished_at, record)
SELECT id, request_id, pod, tenant, status, updated_at, to_jsonb(moved) FROM moved
"""
COUNT_MOVABLE_SQL = {
    "containers": MOVE_CONTAINERS_SQL.split("), moved")[0]
    .replace("WITH picked AS (", "SELECT count(*) FROM (")
    .replace("FOR UPDATE OF c SKIP LOCKED", "")
    + ") AS movable",
    "deploys": MOVE_DEPLOYS_SQL.split("), moved")[0]
    .replace("WITH picked AS (", "SELECT count(*) FROM (")
    .replace("FOR UPDATE OF d SKIP LOCKED", "")
    + ") AS movable",
}
PARTITIONS_SQL = """
SELECT c.relname AS name,
       pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT' AS is_default,
       substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \\(''([^'']+)''\\)')::timestamptz AS range_from,
       substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \\(''([^'']+)''\\)')::timestamptz AS range_to
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = $1::regclass
 ORDER BY range_to NULLS FIRST
"""
SIZES_SQL = """
WITH tables AS (SELECT t.name, to_regclass(t.name) AS oid FROM unnest($1::text[]) AS t (name)),
     members AS (
    SELECT t.name, p.relid FROM tables t, pg_partition_tree(t.oid) p WHERE p.isleaf
    UNION
    SELECT t.name, t.oid FROM tables t WHERE t.oid IS NOT NULL
)
SELECT m.name, sum(pg_total_relation_size(m.relid)) AS bytes, coalesce(sum(s.n_live_tup), 0) AS rows_estimate
  FROM members m LEFT JOIN pg_stat_user_tables s ON s.relid = m.relid
 GROUP BY m.name
"""


def bucket_seconds(retention_seconds: float) -> int:
    """The width of one time partition: a sixth of the retention, between a minute and a day. A record lives
    between `retention` and `retention + bucket` (plus one pass) before its partition is dropped."""
    return int(min(max(retention_seconds // 6, 60), 86400))


def grace_seconds(retention_seconds: float) -> float:
    """How long a finished row stays in its live table before it moves: long enough for late events of that
    container (a `started` after it failed is answered with a `remove`), short against the retention."""
    return float(min(300.0, retention_seconds / 4))


@dataclass(frozen=True)
class Partition:
    """One range partition (or the default partition) of a retained table."""

    table: str
    name: str
    range_from: datetime | None
    range_to: datetime | None
    is_default: bool = False


@dataclass
class GcReport:
    """What a retention pass did (or, with `dry_run`, would do)."""

    dry_run: bool
    retention_seconds: float
    now: datetime
    moved: dict[str, int] = field(default_factory=dict)  # live table → rows moved to its history
    created: list[str] = field(default_factory=list)  # partitions created ahead
    dropped: list[dict[str, Any]] = field(default_factory=list)  # {table, partition, range_to, rows}
    default_rows_deleted: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # partitions whose drop found the table busy
    ran: bool = True  # False when another process held the retention lock

    def as_dict(self) -> dict[str, Any]:
        """JSON form (`eru gc -o json`)."""
        return {
            "dry_run": self.dry_run,
            "ran": self.ran,
            "retention_seconds": self.retention_seconds,
            "now": self.now.isoformat(),
            "moved": self.moved,
            "created": self.created,
            "dropped": [{**d, "range_to": d["range_to"].isoformat()} for d in self.dropped],
            "default_rows_deleted": self.default_rows_deleted,
            "skipped": self.skipped,
        }


async def partitions(conn: Connection, table: str) -> list[Partition]:
    """The partitions of `table`, oldest first (the default partition first of all)."""
    rows = await conn.fetch(PARTITIONS_SQL, table)
    return [Partition(table, r["name"], r["range_from"], r["range_to"], bool(r["is_default"])) for r in rows]


def partitions_to_create(
    existing: list[Partition], now: datetime, bucket: int, since: datetime | None = None
) -> list[tuple[datetime, datetime]]:
    """Ranges to add so that partitions cover `since` (default `now`: rows about to be moved finished a little
    earlier) up to `AHEAD_BUCKETS` buckets after `now` (pure)."""
    step = timedelta(seconds=bucket)
    aligned = datetime.fromtimestamp(int((since or now).timestamp()) // bucket * bucket, UTC)
    ends = [p.range_to for p in existing if not p.is_default and p.range_to is not None]
    start = max([aligned, *ends])
    wanted = []
    while start < now + AHEAD_BUCKETS * step:
        wanted.append((start, start + step))
        start += step
    return wanted


def partitions_to_drop(existing: list[Partition], now: datetime, retention_seconds: float) -> list[Partition]:
    """Partitions whose every row is older than the retention (pure)."""
    cutoff = now - timedelta(seconds=retention_seconds)
    return [p for p in existing if not p.is_default and p.range_to is not None and p.range_to <= cutoff]


def _partition_name(table: str, start: datetime) -> str:
    return f"{table}_p{int(start.timestamp())}"


async def _create(
    conn: Connection, table: str, column: str, default: str | None, start: datetime, end: datetime
) -> str:
    """Add the partition [start, end). Rows the default partition caught in that range (written before any partition
    covered it) move into the new table first: PostgreSQL refuses to attach a range the default partition holds."""
    name = _partition_name(table, start)
    bounds = f"FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
    async with conn.transaction():
        await conn.execute(f"SET LOCAL lock_timeout = '{DDL_LOCK_TIMEOUT}'")
        # The parent first, and whole (see `_lock_parent`): no insert runs meanwhile (one routed to the default
        # partition before the attach and checked after it fails "violates partition constraint"), and the attach's
        # lock on the default partition is then free.
        await _lock_parent(conn, table)
        await conn.execute(f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
        if default is not None:
            await conn.execute(
                f"WITH moved AS (DELETE FROM {default} WHERE {column} >= $1 AND {column} < $2 RETURNING *) "
                f"INSERT INTO {name} SELECT * FROM moved",
                start,
                end,
            )
        await conn.execute(f"ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES {bounds}")
    return name


async def _lock_parent(conn: Connection, table: str) -> None:
    """Lock a partitioned table whole before changing its partitions, so the DDL takes its locks in the order
    every query does: parent, then partitions. Attaching takes the default partition `ACCESS EXCLUSIVE` and dropping
    takes the partition before its parent; taken after a lighter lock on the parent, each waited for a transaction
    that had read the partition and then waited to write the parent behind the DDL — a lock cycle that only the
    `lock_timeout` ended (300 ms stalls of every deploy, and the partition never made: found by tracing the soak,
    docs/store.md "Retention"). Holding the parent, nothing else can hold or wait for its partitions."""
    await conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")


async def _drop(conn: Connection, partition: Partition) -> int:
    async with conn.transaction():
        await conn.execute(f"SET LOCAL lock_timeout = '{DDL_LOCK_TIMEOUT}'")
        rows = int(await conn.fetchval(f"SELECT count(*) FROM {partition.name}"))  # ended: nothing new comes in
        await _lock_parent(conn, partition.table)
        await conn.execute(
            """INSERT INTO retention_drops (table_name, partition, range_from, range_to, rows)
               VALUES ($1, $2, $3, $4, $5) ON CONFLICT (table_name, range_to) DO NOTHING""",
            partition.table,
            partition.name,
            partition.range_from,
            partition.range_to,
            rows,
        )
        await conn.execute(f"DROP TABLE {partition.name}")
    return rows


async def _expire_default(conn: Connection, default: Partition, column: str, cutoff: datetime, dry_run: bool) -> int:
    """Delete what the default partition holds from before the cutoff (normally nothing), recorded like a drop."""
    if dry_run:
        return int(await conn.fetchval(f"SELECT count(*) FROM {default.name} WHERE {column} < $1", cutoff))
    async with conn.transaction():
        rows = int(
            await conn.fetchval(
                f"WITH gone AS (DELETE FROM {default.name} WHERE {column} < $1 RETURNING 1) SELECT count(*) FROM gone",
                cutoff,
            )
        )
        if rows:
            await conn.execute(
                """INSERT INTO retention_drops (table_name, partition, range_from, range_to, rows)
                   VALUES ($1, $2, NULL, $3, $4) ON CONFLICT (table_name, range_to) DO NOTHING""",
                default.table,
                default.name,
                cutoff,
                rows,
            )
    return rows


async def _move(conn: Connection, sql: str, cutoff: datetime) -> int:
    total = 0
    while True:
        async with conn.transaction():
            status: str = await conn.execute(sql, cutoff, MOVE_BATCH)
        moved = int(status.split()[-1])
        total += moved
        if moved < MOVE_BATCH:
            return total


async def collect(
    pool: asyncpg.Pool, retention_seconds: float, *, dry_run: bool = False, at: datetime | None = None
) -> GcReport:
    """One retention pass: move finished rows to history, add partitions ahead, drop expired ones. With `dry_run`,
    only counts what it would do. Several processes may call it together: one runs, the others return `ran=False`.
    `at` acts as if it were that time (tests: a pass in the future); by default the database's `now()`.
    """
    bucket = bucket_seconds(retention_seconds)
    async with pool.acquire() as conn:
        now: datetime = at or await conn.fetchval("SELECT now()")
    report = GcReport(dry_run=dry_run, retention_seconds=retention_seconds, now=now)
    grace_cutoff = now - timedelta(seconds=grace_seconds(retention_seconds))
    cutoff = now - timedelta(seconds=retention_seconds)
    # One connection does it all, so a pool of one suffices: the lock is a session lock on it (always released:
    # `_unlock`), and every step commits on its own.
    async with pool.acquire() as work:
        if not await work.fetchval("SELECT pg_try_advisory_lock($1)", advisory_key(GC_LOCK)):
            report.ran = False
            return report
        try:
            if dry_run:
                for table, sql in COUNT_MOVABLE_SQL.items():
                    report.moved[table] = int(await work.fetchval(sql, grace_cutoff, 10**9))
            else:
                report.moved["containers"] = await _move(work, MOVE_CONTAINERS_SQL, grace_cutoff)
                report.moved["deploys"] = await _move(work, MOVE_DEPLOYS_SQL, grace_cutoff)
            for table, column in PARTITIONED.items():
                existing = await partitions(work, table)
                default = next((p for p in existing if p.is_default), None)
                # from the retention's start: every row kept (or about to move) has a partition, not the default
                for start, end in partitions_to_create(existing, now, bucket, since=cutoff):
                    if dry_run:
                        report.created.append(_partition_name(table, start))
                        continue
                    try:
                        report.created.append(
                            await _create(work, table, column, default.name if default else None, start, end)
                        )
                    except Exception as error:  # lock timeout: busy table, next pass
                        if "lock timeout" not in str(error):
                            raise
                        report.skipped.append(_partition_name(table, start))
                        break
                for partition in partitions_to_drop(existing, now, retention_seconds + LONGER.get(table, 0) * bucket):
                    entry = {"table": table, "partition": partition.name, "range_to": partition.range_to}
                    if dry_run:
                        rows = int(await work.fetchval(f"SELECT count(*) FROM {partition.name}"))
                        report.dropped.append({**entry, "rows": rows})
                        continue
                    try:
                        report.dropped.append({**entry, "rows": await _drop(work, partition)})
                    except Exception as error:  # lock timeout: busy table, next pass
                        if "lock timeout" not in str(error):
                            raise
                        report.skipped.append(partition.name)
                if default is not None:
                    report.default_rows_deleted[table] = await _expire_default(work, default, column, cutoff, dry_run)
            # settled request ids expire by their own windows, not by the retention (eru.store.settled_retention)
            from eru.store.settled_retention import collect_settled  # it imports this module: not at the top

            await collect_settled(work, now, report)
        finally:
            await _unlock(work)
    return report


async def _unlock(conn: Connection) -> None:
    """Release the pass's session lock. Pooled connections keep session state (eru.store.create_pool resets nothing,
    docs/store.md "Connecting"): a connection that cannot say so is closed, and its lock ends with its session."""
    try:
        await conn.execute("SELECT pg_advisory_unlock($1)", advisory_key(GC_LOCK))
    except BaseException:
        conn.terminate()
        raise


@dataclass(frozen=True)
class TableUsage:
    """Storage of one table (all its partitions, indexes and TOAST)."""

    name: str
    bytes: int
    rows_estimate: int


async def storage(conn: Connection, tables: tuple[str, ...] = REPORTED_TABLES) -> list[TableUsage]:
    """Bytes and live rows per table (the statistics collector's counts: cheap, and current to within a second or so
    of the last commit, where the planner's `reltuples` stays 0 until the first autovacuum or ANALYZE)."""
    rows = await conn.fetch(SIZES_SQL, list(tables))
    return [TableUsage(r["name"], int(r["bytes"]), int(r["rows_estimate"])) for r in rows]


_UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$")


def id_time(record_id: str) -> datetime | None:
    """The creation time carried by a UUIDv7 id (eru.bus.new_id), or None for any other id."""
    if not _UUID7.match(record_id):
        return None
    millis = int(record_id.replace("-", "")[:12], 16)
    return datetime.fromtimestamp(millis / 1000, UTC)


async def expired_at(conn: Connection | asyncpg.Pool, table: str, record_id: str) -> tuple[datetime, datetime] | None:
    """For a record not found: (when its partition was dropped, the end of that partition) if retention dropped
    the time range its id was created in; None when nothing says it expired."""
    created = id_time(record_id)
    if created is None:
        return None
    row = await conn.fetchrow(
        """SELECT dropped_at, range_to FROM retention_drops
            WHERE table_name = $1 AND (range_from IS NULL OR range_from <= $2::timestamptz + interval '1 minute')
              AND range_to > $2::timestamptz - interval '1 minute'
            ORDER BY (coalesce(range_from <= $2::timestamptz, true) AND range_to > $2::timestamptz) DESC, range_to
            LIMIT 1""",
        table,
        created,
    )
    return None if row is None else (row["dropped_at"], row["range_to"])
