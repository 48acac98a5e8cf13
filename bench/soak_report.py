"""Markdown tables of a soak's JSON lines (bench/soak.py): the windows, and issue 19's checks with value and target.

Usage: python -m bench.soak_report soak.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.soak_probe import P99_MAX_MS, P99_MEDIAN_MS, RSS_RATIO, STORAGE_RATIO

MIB = 1024 * 1024


def load(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The samples and the summary (None when the run did not finish)."""
    samples, summary = [], None
    for line in path.read_text().splitlines():
        if not line.startswith("{"):
            continue
        value = json.loads(line)
        if "summary" in value:
            summary = value["summary"]
        elif "t" in value:
            samples.append(value)
    return samples, summary


def windows(samples: list[dict[str, Any]]) -> list[str]:
    """One row per sample window: load, throughput, latencies, hops (with --trace), live containers, storage."""
    rows = [
        "| t (s) | load 1m | deploys | reply p50/p99 ms | completed p50/p99 ms | slowest hop p99 | live | PG MB | "
        "streams MB | logs MB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in samples:
        trace = s.get("trace") or {}
        hops = {h: trace.get(f"{h}_p99_ms") for h in ("reply", "planned", "command", "agent", "event_to_end")}
        known = {h: v for h, v in hops.items() if v is not None}
        slowest = max(known.items(), key=lambda kv: kv[1]) if known else None
        storage = s["storage_bytes"]
        rows.append(
            f"| {s['t']:.0f} | {s['loadavg'][0] if 'loadavg' in s else '–'} | {s['deploys']} "
            f"| {s['reply_p50_ms']} / {s['reply_p99_ms']} | {s['completed_p50_ms']} / {s['completed_p99_ms']} "
            f"| {f'{slowest[0]} {slowest[1]}' if slowest else '–'} | {s['tables']['_live_containers']['rows']} "
            f"| {storage['postgres'] / MIB:.1f} | {storage['streams'] / MIB:.1f} | {storage['logs'] / MIB:.1f} |"
        )
    return rows


def checks(summary: dict[str, Any]) -> list[str]:
    """Issue 19's measurement, one row per check."""
    c = summary["checks"]
    lost = summary["lost"]
    storage = summary["storage_end_over_middle"]
    rss = summary["rss_end_over_middle"]
    cap = summary["options"]["log_max_bytes"]

    def met(ok: bool) -> str:
        return "**yes**" if ok else "**no**"

    worst_storage = max(storage.items(), key=lambda kv: kv[1]) if storage else ("–", 0)
    worst_rss = max(rss.items(), key=lambda kv: kv[1]) if rss else ("–", 0)
    return [
        "| check | value | target | met? |",
        "|---|---|---|---|",
        f"| nothing lost | {summary['requests']} requests, {summary['accepted']} accepted, {summary['ended']} ended; "
        f"unanswered {lost['unanswered']}, not ended {lost['not_ended']}, unsettled containers "
        f"{lost['unsettled_containers']}, failed removes {lost['remove_errors']} | all 0 | {met(c['nothing_lost'])} |",
        f"| deadlocks | {summary['deadlocks']} (PostgreSQL count at the end) | 0 (count and log lines) "
        f"| {met(c['no_deadlock'])} |",
        f"| allocation invariant | {len(summary['invariant_violations'])} violations | 0 | {met(c['invariant'])} |",
        "| storage minute 20 / minute 10 | "
        + ", ".join(f"{k} {v}" for k, v in storage.items())
        + f" (worst {worst_storage[0]}) | ≤ {STORAGE_RATIO} | {met(c['storage_flat'])} |",
        "| every stream minute 20 / minute 10 | "
        + ", ".join(f"{k} {v}" for k, v in (summary.get("streams_end_over_middle") or {}).items())
        + f" | ≤ {STORAGE_RATIO} (streams over 1 MiB) | {met(c['storage_flat'])} |",
        f"| log files | largest {summary['largest_log_file_bytes']:,} B | ≤ {cap:,} B | {met(c['logs_within_cap'])} |",
        f"| logs per process | logs end/middle {storage.get('logs')} (until rotation caps them) | ≤ 4 × {cap:,} B "
        f"(file + 3 rotated) | {met(c.get('logs_bounded', False))} |",
        "| RSS minute 20 / minute 10 | "
        + ", ".join(f"{k} {v}" for k, v in rss.items())
        + f" (worst {worst_rss[0]}) | ≤ {RSS_RATIO} | {met(c['rss_flat'])} |",
        f"| completed p99, median of windows | {summary['completed_p99_ms_median']} ms | < {P99_MEDIAN_MS:g} ms "
        f"| {met(c['p99_median_under_250ms'])} |",
        f"| completed p99, worst window | {summary['completed_p99_ms_max']} ms | < {P99_MAX_MS:g} ms "
        f"| {met(c['no_window_over_1s'])} |",
        f"| all | | | {met(c['all'])} |",
    ]


def main() -> None:
    samples, summary = load(Path(sys.argv[1]))
    print("\n".join(windows(samples)))
    print()
    print("\n".join(checks(summary)) if summary else "(no summary: the run did not finish)")


if __name__ == "__main__":
    main()
