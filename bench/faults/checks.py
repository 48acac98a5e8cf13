"""What must hold after every fault: the ledger's allocation invariants, every message settled, no ghost in the
ledger, no answer or log line that reports a bug (a handler error, a traceback) (docs/reliability.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any

import asyncpg

from eru.bus import connect
from eru.bus.codec import decode_value
from eru.bus.streams import default_streams

NODES_SQL = "SELECT name, cpu_map, used_cpu_map, memory, used_memory FROM nodes"
LIVE_SQL = """
SELECT node, allocation FROM containers
 WHERE state NOT IN ('removed', 'failed', 'lost') AND replaces IS NULL
"""


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


async def invariant_violations(dsn: str) -> list[str]:
    """Per node: usage equals the sum of its live containers' allocations, no core beyond its capacity, no memory
    beyond the node's; each broken rule is one line."""
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        nodes = await conn.fetch(NODES_SQL)
        live = await conn.fetch(LIVE_SQL)
    finally:
        await conn.close()
    cpu: dict[str, dict[str, int]] = {}
    memory: dict[str, int] = {}
    for row in live:
        allocation = _json(row["allocation"])
        per_core = cpu.setdefault(row["node"], {})
        for core, pieces in (allocation.get("cpu_map") or {}).items():
            per_core[core] = per_core.get(core, 0) + int(pieces)
        memory[row["node"]] = memory.get(row["node"], 0) + int(allocation.get("memory") or 0)
    problems = []
    for node in nodes:
        name = node["name"]
        used = {k: int(v) for k, v in _json(node["used_cpu_map"]).items() if int(v)}
        expected = {k: v for k, v in cpu.get(name, {}).items() if v}
        if used != expected:
            problems.append(f"{name}: used cpu {used} != live allocations {expected}")
        if int(node["used_memory"]) != memory.get(name, 0):
            problems.append(f"{name}: used memory {node['used_memory']} != live allocations {memory.get(name, 0)}")
        capacity = _json(node["cpu_map"])
        over = {core: pieces for core, pieces in used.items() if pieces > int(capacity.get(core, 0))}
        if over:
            problems.append(f"{name}: cores over capacity {over}")
        if int(node["used_memory"]) > int(node["memory"]):
            problems.append(f"{name}: memory over capacity")
    return problems


async def unsettled(url: str, quiet_seconds: float = 20.0) -> dict[str, int]:
    """Messages delivered but not settled (acked, terminated or dead-lettered), per consumer, once the stack has had
    `quiet_seconds` to finish: 0 everywhere is the target."""
    nc = await connect(url, name="faults-check", connect_timeout=10)
    try:
        js = nc.jetstream()
        deadline = time.monotonic() + quiet_seconds
        while True:
            pending: dict[str, int] = {}
            for spec in default_streams():
                with contextlib.suppress(Exception):
                    for consumer in await js.consumers_info(spec.name):
                        if consumer.num_ack_pending:
                            pending[f"{spec.name}/{consumer.name}"] = int(consumer.num_ack_pending)
            if not pending or time.monotonic() > deadline:
                return pending
            await asyncio.sleep(1.0)
    finally:
        await nc.close()


async def ledger_ghosts(run_eru: Any, state_dir: str, within: float = 30.0) -> int | None:
    """Containers the ledger holds that their node does not run, by `eru reconcile --dry-run` (None if it fails)."""
    deadline = time.monotonic() + within
    while True:
        done = await asyncio.to_thread(run_eru, "reconcile", "--dry-run", "-o", "json", "--state-dir", state_dir)
        if done.returncode == 0:
            findings = json.loads(done.stdout).get("findings", [])
            return sum(1 for f in findings if f["kind"] in ("lost", "gone"))
        if time.monotonic() > deadline:
            return None
        await asyncio.sleep(1.0)


BUG_CODES = ("handler_error", "internal")  # error codes that mean a handler raised what it should have refused
BUG_EVENTS = ("bus.message.handler_error", "bus.responder.handler_error", "bus.consumer.internal_error", "Traceback")


def handler_failure(data: bytes, headers: dict[str, str] | None) -> str | None:
    """`code: message` when a reply reports a bug (an error reply with a bug's code, any traceback), else None."""
    if b"Traceback" in data:
        return "a traceback in the answer"
    if (headers or {}).get("Eru-Status") != "error" and b"error" not in data[:64]:
        return None
    try:
        body = decode_value(data, (headers or {}).get("Content-Type"))
    except Exception:
        return None
    if isinstance(body, dict) and body.get("code") in BUG_CODES:
        return f"{body['code']}: {str(body.get('message', ''))[:160]}"
    return None


def log_sizes(state_dir: Path) -> dict[str, int]:
    """The size of every log file of a stack: where `bugs_logged` starts reading."""
    return {str(log): log.stat().st_size for log in (state_dir / "logs").glob("*.log")}


def bugs_logged(state_dir: Path, since: dict[str, int]) -> tuple[int, list[str]]:
    """Log lines written after `since` (log_sizes) that report a bug (a handler error, a traceback), and the first
    few of them (file: line, clipped)."""
    count, examples = 0, []
    for log in sorted((state_dir / "logs").glob("*.log")):
        with log.open("rb") as handle:
            handle.seek(since.get(str(log), 0))
            for raw in handle:
                line = raw.decode(errors="replace")
                if any(event in line for event in BUG_EVENTS):
                    count += 1
                    if len(examples) < 5:
                        examples.append(f"{log.name}: {line.strip()[:300]}")
    return count, examples
