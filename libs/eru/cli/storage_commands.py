"""`eru gc [--dry-run]`: apply retention now (docs/operations.md "Retention"); and the storage part of `eru status`.

Storage is reported per PostgreSQL table (bytes, estimated rows), per stream against its byte cap, and per log file
against its rotation size; anything at `WARN_FRACTION` of its cap or more is a warning, before the cap is reached
(a stream at its cap starts dropping its oldest messages).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from eru.cli.app import app
from eru.cli.bus_client import (
    DEFAULT_STATE_DIR,
    DatabaseOption,
    NatsOption,
    StateDirOption,
    console,
    fail,
    run_async,
)
from eru.cli.output import Format, JsonOption, OutputOption, chosen, document, emit
from eru.errors import EruError

WARN_FRACTION = 0.8
# How each reported table is bounded (docs/operations.md "Retention"): tables have an age, not a byte cap.
TABLE_KEPT = {
    "containers": "live; finished rows move to history",
    "deploys": "live; ended deploys move to history",
    "deploy_waits": "live",
    "nodes": "live",
    "containers_history": "retention",
    "deploys_history": "retention",
    "decisions": "retention",
    "decision_snapshots": "retention",
    "settled_requests": "redelivery window",
    "outbox": "min(1 h, retention)",
    "inbox": "min(1 day, retention)",
    "retention_drops": "one row per dropped partition",
}


def _settings() -> Any:
    """The settings, or one line naming a bad one (exit 2)."""
    from eru.settings import load_settings

    try:
        return load_settings()
    except EruError as error:
        fail(error.message, code=2)


def _storage_settings() -> dict[str, Any]:
    """`eru.stack.info.storage_settings`, or one line naming a bad setting (exit 2)."""
    from eru.stack.info import storage_settings

    try:
        return storage_settings()
    except EruError as error:
        fail(error.message, code=2)


async def _table_usage(dsn: str) -> tuple[list[dict[str, Any]], float]:
    """Bytes, rows and how each table is kept; with its oldest time partition's end where it has partitions; and the
    database's clock (epoch seconds), which the warnings compare against."""
    from eru.store.pool import connect
    from eru.store.retention import PARTITIONED, partitions, storage

    conn = await connect(dsn)
    try:
        rows = []
        for usage in await storage(conn):
            row: dict[str, Any] = {"table": usage.name, "bytes": usage.bytes, "rows": usage.rows_estimate}
            row["kept"] = TABLE_KEPT.get(usage.name, "")
            if usage.name in PARTITIONED:
                ends = [p.range_to for p in await partitions(conn, usage.name) if p.range_to is not None]
                row["oldest_partition_end"] = min(ends).isoformat() if ends else None
            rows.append(row)
        now = float(await conn.fetchval("SELECT extract(epoch FROM now())"))
        return rows, now
    finally:
        await conn.close()


async def _stream_usage(nats_url: str) -> list[dict[str, Any]]:
    from eru.bus.connection import connect

    nc = await connect(nats_url, name="eru-storage", connect_timeout=3)
    try:
        rows = []
        for info in await nc.jetstream().streams_info():
            cap = int(info.config.max_bytes or -1)
            used = int(info.state.bytes)
            rows.append(
                {
                    "stream": info.config.name,
                    "bytes": used,
                    "messages": int(info.state.messages),
                    "max_bytes": cap,
                    "max_age_seconds": float(info.config.max_age or 0),
                    "retention": str(getattr(info.config.retention, "value", info.config.retention) or "limits"),
                    "used_fraction": round(used / cap, 4) if cap > 0 else None,
                }
            )
        return sorted(rows, key=lambda row: str(row["stream"]))
    finally:
        await nc.close()


def log_usage(state_dir: Path, max_bytes: int, backups: int) -> list[dict[str, Any]]:
    """Bytes per service log under `state_dir/logs` (the current file and its rotated ones) against what rotation
    lets it hold: (backups + 1) × max_bytes; the current file against max_bytes."""
    logs = state_dir / "logs"
    if not logs.is_dir():
        return []
    rows = []
    for current in sorted(logs.glob("*.log")):
        rotated = sorted(logs.glob(current.name + ".*"))
        size = current.stat().st_size
        rows.append(
            {
                "log": current.name,
                "bytes": size + sum(p.stat().st_size for p in rotated),
                "current_bytes": size,
                "files": 1 + len(rotated),
                "max_bytes": max_bytes,
                "cap_bytes": (backups + 1) * max_bytes,
            }
        )
    return rows


def storage_warnings(storage: dict[str, Any]) -> list[str]:
    """What is at `WARN_FRACTION` of its cap or more, and tables holding a partition retention should have dropped
    by now (more than two partition widths past the retention: the retention passes are not running) (pure)."""
    from datetime import datetime

    from eru.store.retention import bucket_seconds

    warnings = []
    retention = storage.get("retention_seconds")
    now = storage.get("now")
    for row in storage.get("tables", []):
        end = row.get("oldest_partition_end")
        if end is None or retention is None or now is None:
            continue
        overdue = now - datetime.fromisoformat(end).timestamp() - retention
        if overdue > 2 * bucket_seconds(retention):
            warnings.append(
                f"table {row['table']} still holds a partition that ended {_age(overdue + retention)} ago, past its "
                f"{_age(retention)} retention: is retention running? (`eru gc` applies it now)"
            )
    for row in storage.get("streams", []):
        fraction = row.get("used_fraction")
        if fraction is not None and fraction >= WARN_FRACTION:
            held = f"stream {row['stream']} holds {fraction:.0%} of its {_size(row['max_bytes'])} cap"
            if not row["stream"].startswith("ERU_"):  # a KV bucket (docs/operations.md "Retention")
                warnings.append(f"{held}: at the cap it refuses new keys")
                continue
            age = "ERU_BUS__METRICS_MAX_AGE_SECONDS" if row["stream"] == "ERU_METRICS" else "ERU_RETENTION_SECONDS"
            advice = f"raise ERU_STREAM_MAX_BYTES or lower {age}"
            warnings.append(f"{held}: the oldest messages go first at the cap ({advice})")
    for row in storage.get("logs", []):
        if row["bytes"] > row["cap_bytes"] or row["current_bytes"] > row["max_bytes"] * 1.05:
            warnings.append(f"log {row['log']} is over its rotation cap ({row['bytes']} bytes): is it rotating?")
    return warnings


def storage_document(nats_url: str | None, dsn: str | None, state_dir: Path) -> dict[str, Any]:
    """Tables, streams and logs with their caps, and the warnings (the `storage` field of `eru status`): against the
    settings the stack under `state_dir` runs with (recorded by `eru up`), else this process's own."""
    from eru.stack.info import StackInfo

    info = StackInfo.load(state_dir)
    settings = {**_storage_settings(), **(info.settings if info is not None else {})}
    out: dict[str, Any] = {"tables": [], "streams": [], "logs": [], "problems": []}
    out["retention_seconds"] = int(settings["retention_seconds"])
    if dsn:
        try:
            out["tables"], out["now"] = run_async(_table_usage(dsn))
        except EruError as error:
            out["problems"].append(f"postgres: {error.message}")
    if nats_url:
        try:
            out["streams"] = run_async(_stream_usage(nats_url))
        except EruError as error:
            out["problems"].append(f"nats: {error.message}")
    out["logs"] = log_usage(state_dir, int(settings["log_max_bytes"]), int(settings["log_backups"]))
    out["warnings"] = storage_warnings(out)
    return out


def print_storage(storage: dict[str, Any]) -> None:
    """The storage tables of `eru status` (text)."""
    from rich.table import Table

    table = Table(title="storage")
    for column in ("kind", "name", "used", "cap / kept", "rows / messages / files"):
        table.add_column(column, overflow="fold")
    for row in storage["tables"]:
        kept = row.get("kept", "")
        if kept == "retention":
            kept = f"retention {_age(storage['retention_seconds'])}"
        table.add_row("table", row["table"], _size(row["bytes"]), kept, f"~{row['rows']}")
    for row in storage["streams"]:
        cap = _size(row["max_bytes"]) if row["max_bytes"] > 0 else "none"
        share = f" ({row['used_fraction']:.0%})" if row["used_fraction"] is not None else ""
        table.add_row("stream", row["stream"], _size(row["bytes"]) + share, cap, str(row["messages"]))
    for row in storage["logs"]:
        table.add_row("log", row["log"], _size(row["bytes"]), _size(row["cap_bytes"]), str(row["files"]))
    console.print(table)
    for warning in [*storage["warnings"], *storage["problems"]]:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)


def _age(seconds: float) -> str:
    for unit, scale in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds:.0f} s"


def _size(value: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value} B"


async def _collect(dsn: str, retention_seconds: float, dry_run: bool) -> dict[str, Any]:
    from eru.store.pool import create_pool
    from eru.store.retention import collect

    pool = await create_pool(dsn, min_size=1, max_size=4)
    try:
        report = await collect(pool, retention_seconds, dry_run=dry_run)
    finally:
        await pool.close()
    return report.as_dict()


@app.command("gc")
def gc(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what retention would do; change nothing.")] = False,
    retention: Annotated[
        float | None,
        typer.Option(
            "--retention", help="Seconds to keep finished records (default: the stack's ERU_RETENTION_SECONDS)."
        ),
    ] = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    nats: NatsOption = None,
    database: DatabaseOption = None,
    output: OutputOption = Format.text,
    as_json: JsonOption = False,
) -> None:
    """Apply retention now: finished containers and deploys to history, expired partitions dropped; shows storage."""
    from eru.stack.info import StackInfo

    fmt = chosen(output, as_json)
    info = StackInfo.load(state_dir)
    dsn = database or (info.database_dsn if info else None)
    nats_url = nats or (info.nats_url if info else None)
    if dsn is None:
        fail(f"no stack under {state_dir}: start one with `eru up`, or pass --database", code=2)
    recorded = info.settings.get("retention_seconds") if info is not None else None  # what the stack runs with
    seconds = retention if retention is not None else float(recorded or _settings().retention_seconds)
    if seconds < 60:
        fail(f"--retention must be at least 60 seconds (got {seconds:g})", code=2)
    try:
        report = run_async(_collect(dsn, seconds, dry_run))
    except EruError as error:
        fail(error.message, code=3)
    storage = storage_document(nats_url, dsn, state_dir)
    doc = document("gc", **report, storage=storage)
    if fmt is not Format.text:
        emit(doc, fmt)
        return
    verb = "would move" if dry_run else "moved"
    if not report["ran"]:
        console.print("another process is applying retention right now; nothing done")
    moved = ", ".join(f"{rows} {table}" for table, rows in report["moved"].items()) or "nothing"
    console.print(f"retention {seconds:g} s: {verb} {moved} to history", highlight=False)
    for drop in report["dropped"]:
        what = "would drop" if dry_run else "dropped"
        console.print(f"{what} {drop['partition']} ({drop['rows']} rows, up to {drop['range_to']})", highlight=False)
    for name in report["skipped"]:
        console.print(f"[yellow]busy:[/] {name} left for the next pass", highlight=False)
    print_storage(storage)
