"""What the soak (bench/soak.py) measures about a running `eru up` stack, and its summary (slopes, ratios, checks)."""

from __future__ import annotations

import asyncio
import json
import statistics
from pathlib import Path
from typing import Any

import psutil

from eru.stack.info import StackInfo

# Issue 19's measurement: storage at the end within 1.3× of the middle, RSS within 1.2×, publish→completed p99 under
# 250 ms as the median of the windows and no window over 1 s.
STORAGE_RATIO = 1.3
RSS_RATIO = 1.2
P99_MEDIAN_MS = 250.0
P99_MAX_MS = 1000.0
DEADLOCK_MARKS = ("DeadlockDetectedError", "deadlock detected")
# tables counted exactly in every sample (the others: the planner's estimate)
EXACT_COUNTS = ("containers", "deploys", "containers_history", "deploys_history", "decisions", "retention_drops")
HELD_CPU_SQL = """
SELECT node, key, sum(value::numeric) AS pieces
  FROM containers, jsonb_each_text(coalesce(allocation -> 'cpu_map', '{}'))
 WHERE state NOT IN ('removed', 'failed') AND replaces IS NULL
 GROUP BY node, key
"""


SMALL_STREAM_BYTES = 1024 * 1024
LOG_BACKUPS = 3  # ERU_LOG_BACKUPS's default (eru.settings): each process keeps its file and 3 rotated ones


def _per_process(logs: dict[str, int]) -> dict[str, int]:
    """Log bytes per process: `allocator.log`, `allocator.log.1` … add up under `allocator`."""
    out: dict[str, int] = {}
    for name, size in logs.items():
        process = name.split(".", 1)[0]
        out[process] = out.get(process, 0) + size
    return out


def percentile(values: list[float], fraction: float) -> float:
    """The `fraction` percentile (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def fit_slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (t seconds, value) points, per minute; None for fewer than two points."""
    if len(points) < 2:
        return None
    ts = [t for t, _ in points]
    vs = [v for _, v in points]
    mean_t, mean_v = statistics.fmean(ts), statistics.fmean(vs)
    spread = sum((t - mean_t) ** 2 for t in ts)
    if spread == 0:
        return None
    return 60 * sum((t - mean_t) * (v - mean_v) for t, v in zip(ts, vs, strict=True)) / spread


class Probe:
    """Samples of one stack: processes, PostgreSQL, JetStream, log files."""

    def __init__(self, info: StackInfo, state_dir: Path) -> None:
        self.info = info
        self.state_dir = state_dir
        self.pool: Any = None
        self.nc: Any = None

    async def open(self) -> None:
        from eru.bus import connect
        from eru.store import create_pool

        self.pool = await create_pool(self.info.database_dsn, min_size=1, max_size=2)
        self.nc = await connect(self.info.nats_url, name="soak-probe")

    async def wait_for_nodes(self, count: int, within: float) -> None:
        """Until `count` nodes have registered (or `within` seconds passed)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while loop.time() < deadline:
            if int(await self.pool.fetchval("SELECT count(*) FROM nodes")) >= count:
                return
            await asyncio.sleep(0.2)

    async def close(self) -> None:
        if self.nc is not None:
            await self.nc.close()
        if self.pool is not None:
            await self.pool.close()

    def rss(self) -> dict[str, int]:
        """RSS bytes per process of the stack; PostgreSQL as the sum of its processes' private memory (USS) plus its
        shared memory once, since every backend maps the same shared buffers."""
        out: dict[str, int] = {}
        for name, pid in {**self.info.processes, **self.info.server_pids}.items():
            try:
                process = psutil.Process(pid)
                if name == "postgres":
                    members = [process, *process.children(recursive=True)]
                    private = sum(p.memory_full_info().uss for p in members)
                    shared = max(p.memory_info().shared for p in members)
                    out[name] = private + shared
                else:
                    out[name] = process.memory_info().rss
            except psutil.Error:
                out[name] = -1
        return out

    async def tables(self) -> dict[str, dict[str, int]]:
        from eru.store.retention import storage

        async with self.pool.acquire() as conn:
            usage = await storage(conn)
            live = await conn.fetchval("SELECT count(*) FROM containers WHERE state NOT IN ('removed', 'failed')")
            database = await conn.fetchval("SELECT pg_database_size(current_database())")
            exact = {table: int(await conn.fetchval(f"SELECT count(*) FROM {table}")) for table in EXACT_COUNTS}
        out = {u.name: {"bytes": u.bytes, "rows": exact.get(u.name, u.rows_estimate)} for u in usage}
        out["_database"] = {"bytes": int(database), "rows": 0}
        out["_live_containers"] = {"bytes": 0, "rows": int(live)}
        return out

    async def streams(self) -> dict[str, int]:
        infos = await self.nc.jetstream().streams_info()
        return {str(info.config.name): int(info.state.bytes) for info in infos}

    def logs(self) -> dict[str, int]:
        logs = self.state_dir / "logs"
        return {p.name: p.stat().st_size for p in sorted(logs.iterdir()) if p.is_file()} if logs.is_dir() else {}

    async def deadlocks(self) -> int:
        return int(
            await self.pool.fetchval("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        )

    async def sample(self) -> dict[str, Any]:
        tables = await self.tables()
        streams = await self.streams()
        logs = self.logs()
        return {
            "rss": self.rss(),
            "tables": tables,
            "streams": streams,
            "logs": logs,
            "storage_bytes": {
                "postgres": tables["_database"]["bytes"],
                "streams": sum(streams.values()),
                "logs": sum(logs.values()),
            },
            "deadlocks": await self.deadlocks(),
        }

    async def drain(self, load: Any, within: float) -> dict[str, Any]:
        """After the load: wait (up to `within`) for every accepted deploy to end and every remove to be confirmed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        stopping = -1
        while loop.time() < deadline:
            stopping = int(
                await self.pool.fetchval(
                    "SELECT count(*) FROM containers WHERE state IN ('planned', 'creating', 'stopping')"
                )
            )
            if not load.sent and stopping == 0:
                break
            await asyncio.sleep(0.5)
        return {"not_ended": len(load.sent), "unsettled_containers": stopping}

    async def final_checks(self) -> dict[str, Any]:
        """The allocation invariant (usage = what live containers hold, per node) and deadlock lines in the logs."""
        async with self.pool.acquire() as conn:
            nodes = await conn.fetch("SELECT name, used_memory, used_cpu_map, cpu_map, memory FROM nodes")
            held = await conn.fetch(
                "SELECT node, coalesce(sum((allocation ->> 'memory')::bigint), 0) AS memory FROM containers "
                "WHERE state NOT IN ('removed', 'failed') AND replaces IS NULL GROUP BY node"
            )
            cpu = await conn.fetch(HELD_CPU_SQL)
        memory = {row["node"]: int(row["memory"]) for row in held}
        pieces: dict[str, dict[str, int]] = {}
        for row in cpu:
            pieces.setdefault(row["node"], {})[row["key"]] = int(row["pieces"])
        broken = []
        for node in nodes:
            used_cpu = {k: int(v) for k, v in json.loads(node["used_cpu_map"]).items() if int(v)}
            capacity = json.loads(node["cpu_map"])
            if int(node["used_memory"]) != memory.get(node["name"], 0) or used_cpu != pieces.get(node["name"], {}):
                broken.append(f"{node['name']}: usage differs from what its live containers hold")
            if any(used > capacity.get(core, 0) for core, used in used_cpu.items()):
                broken.append(f"{node['name']}: a core is over its capacity")
        deadlock_lines = 0
        logs = self.state_dir / "logs"
        for path in logs.iterdir() if logs.is_dir() else []:
            with path.open(errors="replace") as handle:
                deadlock_lines += sum(1 for line in handle if any(mark in line for mark in DEADLOCK_MARKS))
        return {"invariant_violations": broken, "deadlock_log_lines": deadlock_lines}

    def summary(
        self, args: Any, samples: list[dict[str, Any]], load: Any, drained: dict[str, Any], final: dict[str, Any]
    ) -> dict[str, Any]:
        """Slopes over the second half, end/middle ratios, and the checks."""
        half = [s for s in samples if s["t"] >= args.duration / 2]
        middle = min(samples, key=lambda s: abs(s["t"] - args.duration / 2)) if samples else {}
        end = samples[-1] if samples else {}
        storage_ratio = {
            kind: round(end["storage_bytes"][kind] / max(1, middle["storage_bytes"][kind]), 3)
            for kind in (end.get("storage_bytes") or {})
        }
        # every stream on its own too; one that stays under a MiB at the end is noise, not growth
        stream_ratio = {
            name: round(size / max(1, middle["streams"].get(name, 0)), 3)
            for name, size in (end.get("streams") or {}).items()
            if size >= SMALL_STREAM_BYTES
        }
        rss_ratio = {
            name: round(end["rss"][name] / max(1, middle["rss"].get(name, 1)), 3) for name in (end.get("rss") or {})
        }
        slopes = {
            f"storage.{kind}_bytes_per_min": fit_slope([(s["t"], s["storage_bytes"][kind]) for s in half])
            for kind in (end.get("storage_bytes") or {})
        }
        slopes |= {
            f"rss.{name}_bytes_per_min": fit_slope([(s["t"], s["rss"][name]) for s in half]) for name in rss_ratio
        }
        p99s = [s["completed_p99_ms"] for s in samples if s["completed_p99_ms"] is not None]
        log_cap = args.log_max_bytes
        largest_log = max((size for s in samples for size in s["logs"].values()), default=0)
        lost = {**load.lost(), **drained}
        checks = {
            "nothing_lost": lost["unanswered"] == 0
            and lost["not_ended"] == 0
            and lost["remove_errors"] == 0
            and drained["unsettled_containers"] == 0,
            "no_deadlock": (end.get("deadlocks", 0) - (samples[0]["deadlocks"] if samples else 0)) == 0
            and final["deadlock_log_lines"] == 0,
            "invariant": not final["invariant_violations"],
            # PostgreSQL and every stream by the ratio; logs by their bound (below): a log grows until rotation caps
            # it at (1 + backups) files, so before that its ratio measures elapsed time, not growth
            "storage_flat": bool(storage_ratio)
            and storage_ratio.get("postgres", 99) <= STORAGE_RATIO
            and storage_ratio.get("streams", 99) <= STORAGE_RATIO
            and all(r <= STORAGE_RATIO for r in stream_ratio.values()),
            "logs_bounded": largest_log <= log_cap * 1.01
            and all(
                size <= (1 + LOG_BACKUPS) * log_cap * 1.01 for size in _per_process(end.get("logs") or {}).values()
            ),
            "rss_flat": bool(rss_ratio) and all(r <= RSS_RATIO for r in rss_ratio.values()),
            "logs_within_cap": largest_log <= log_cap * 1.01,
            "p99_median_under_250ms": bool(p99s) and statistics.median(p99s) < P99_MEDIAN_MS,
            "no_window_over_1s": bool(p99s) and max(p99s) < P99_MAX_MS,
        }
        checks["all"] = all(checks.values())
        return {
            "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "requests": load.requests,
            "accepted": load.accepted,
            "refused": load.refused,
            "ended": len(load.ended),
            "removed": load.removed,
            "lost": lost,
            "deadlocks": end.get("deadlocks"),
            "invariant_violations": final["invariant_violations"][:10],
            "storage_end_over_middle": storage_ratio,
            "streams_end_over_middle": stream_ratio,
            "rss_end_over_middle": rss_ratio,
            "slopes_per_minute_second_half": slopes,
            "completed_p99_ms_median": statistics.median(p99s) if p99s else None,
            "completed_p99_ms_max": max(p99s) if p99s else None,
            "largest_log_file_bytes": largest_log,
            "checks": checks,
        }
