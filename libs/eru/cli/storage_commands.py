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


def _settings() -> Any:
    """The settings, or one line naming a bad one (exit 2)."""
    from eru.settings import load_settings

    try:
        return load_settings()
    except EruError as error:
        fail(error.message, code=2)


async def _table_usage(dsn: str) -> list[dict[str, Any]]:
    from eru.store.pool import connect
    from eru.store.retention import storage

    conn = await connect(dsn)
    try:
        return [{"table": u.name, "bytes": u.bytes, "rows": u.rows_estimate} for u in await storage(conn)]
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
    """What is at `WARN_FRACTION` of its cap or more (pure)."""
    warnings = []
    for row in storage.get("streams", []):
        fraction = row.get("used_fraction")
        if fraction is not None and fraction >= WARN_FRACTION:
            warnings.append(
                f"stream {row['stream']} holds {fraction:.0%} of its {row['max_bytes']} byte cap: the oldest messages "
                "go first at the cap (raise ERU_STREAM_MAX_BYTES or lower the retention)"
            )
    for row in storage.get("logs", []):
        if row["bytes"] > row["cap_bytes"] or row["current_bytes"] > row["max_bytes"] * 1.05:
            warnings.append(f"log {row['log']} is over its rotation cap ({row['bytes']} bytes): is it rotating?")
    return warnings


def storage_document(nats_url: str | None, dsn: str | None, state_dir: Path) -> dict[str, Any]:
    """Tables, streams and logs with their caps, and the warnings (the `storage` field of `eru status`)."""
    settings = _settings()
    out: dict[str, Any] = {"tables": [], "streams": [], "logs": [], "problems": []}
    if dsn:
        try:
            out["tables"] = run_async(_table_usage(dsn))
        except EruError as error:
            out["problems"].append(f"postgres: {error.message}")
    if nats_url:
        try:
            out["streams"] = run_async(_stream_usage(nats_url))
        except EruError as error:
            out["problems"].append(f"nats: {error.message}")
    out["logs"] = log_usage(state_dir, settings.log_max_bytes, settings.log_backups)
    out["warnings"] = storage_warnings(out)
    return out


def print_storage(storage: dict[str, Any]) -> None:
    """The storage tables of `eru status` (text)."""
    from rich.table import Table

    table = Table(title="storage")
    for column in ("kind", "name", "used", "cap", "rows / messages / files"):
        table.add_column(column, overflow="fold")
    for row in storage["tables"]:
        table.add_row("table", row["table"], _size(row["bytes"]), "", f"~{row['rows']}")
    for row in storage["streams"]:
        cap = _size(row["max_bytes"]) if row["max_bytes"] > 0 else "none"
        share = f" ({row['used_fraction']:.0%})" if row["used_fraction"] is not None else ""
        table.add_row("stream", row["stream"], _size(row["bytes"]) + share, cap, str(row["messages"]))
    for row in storage["logs"]:
        table.add_row("log", row["log"], _size(row["bytes"]), _size(row["cap_bytes"]), str(row["files"]))
    console.print(table)
    for warning in [*storage["warnings"], *storage["problems"]]:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)


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
        typer.Option("--retention", help="Seconds to keep finished records (default: ERU_RETENTION_SECONDS)."),
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
    seconds = retention if retention is not None else float(_settings().retention_seconds)
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
