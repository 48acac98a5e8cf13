"""The services of `bench_deploy.py`'s stack as processes, and the CPU each part of the stack spends (Linux /proc),
per container deployed: what the deploy benches read beside throughput."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from eru.bus import connect

PARTS = ("eru_allocator", "eru_distributor", "eru_node_agent", "nats-server", "postgres")
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
ALLOCATOR_REPLICA = "eru_allocator/"


def cpu_by_part() -> dict[str, float]:
    """CPU seconds (user + system) used so far by this bench's descendant processes, per part of the stack (Linux
    /proc; empty elsewhere). Less sensitive than throughput to other work sharing the machine."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir() if Path("/proc/self/stat").exists() else []:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        times[pid] = (int(fields[11]) + int(fields[12])) / TICKS
        names[pid] = next((part for part in PARTS if part in cmdline), "other")
        if names[pid] == "eru_allocator":  # each replica apart too (`ALLOCATOR_REPLICA`), beside the part's sum
            with contextlib.suppress(OSError):
                for setting in (entry / "environ").read_bytes().split(b"\0"):
                    if setting.startswith(b"ERU_REPLICA="):
                        names[pid] = f"{ALLOCATOR_REPLICA}{setting[12:].decode(errors='replace')}"
    me = os.getpid()
    totals: dict[str, float] = {}
    for pid in times:
        ancestor = parents.get(pid)
        while ancestor not in (None, 0, 1, me):
            ancestor = parents.get(ancestor)
        if ancestor == me:
            totals[names[pid]] = totals.get(names[pid], 0.0) + times[pid]
            if names[pid].startswith(ALLOCATOR_REPLICA):
                totals["eru_allocator"] = totals.get("eru_allocator", 0.0) + times[pid]
    return totals


async def routed_so_far(nats_url: str) -> int:
    """How many requests allocator replicas have routed to another's partition so far: ERU_PARTITIONS is a work
    queue, so its last sequence counts every routed copy ever stored (docs/replicas.md)."""
    nc = await connect(nats_url, name="bench-routed")
    try:
        info = await nc.jetstream().stream_info("ERU_PARTITIONS")
        return int(info.state.last_seq or 0)
    finally:
        await nc.close()


async def measured(work: Any, containers: int, nats_url: str | None = None) -> dict[str, Any]:
    """Run a burst and add the CPU milliseconds per container each part of the stack spent meanwhile (and, given
    `nats_url`, how many requests took the routed detour through ERU_PARTITIONS)."""
    routed = await routed_so_far(nats_url) if nats_url else 0
    before = cpu_by_part()
    result: dict[str, Any] = await work
    after = cpu_by_part()
    per_key = {key: round(1000 * (after.get(key, 0.0) - before.get(key, 0.0)) / containers, 2) for key in after}
    per_part = {key: ms for key, ms in per_key.items() if not key.startswith(ALLOCATOR_REPLICA)}
    result["cpu_ms_per_container"] = {**per_part, "total": round(sum(per_part.values()), 2)}
    replicas = {key[len(ALLOCATOR_REPLICA) :]: ms for key, ms in per_key.items() if key.startswith(ALLOCATOR_REPLICA)}
    if len(replicas) > 1:
        result["allocator_cpu_ms_per_container_by_replica"] = dict(sorted(replicas.items()))
    if nats_url:
        result["routed_requests"] = await routed_so_far(nats_url) - routed
    return result


def start(module: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """One service process."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", module],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM, then SIGKILL after 15 s."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
