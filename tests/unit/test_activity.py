"""The per-service activity summary: counts, rates, latency percentiles per interval (eru.activity)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import structlog

from eru.activity import Activity
from eru.logging import configure_logging
from eru.service import summarize


def test_an_interval_sums_counts_rates_and_latencies_then_starts_over() -> None:
    activity = Activity()
    activity.start(100.0)
    for index in range(100):
        activity.count("deploy.planned", seconds=(index + 1) / 1000)  # 1 … 100 ms
    activity.count("deploy.completed", 60)
    activity.count("containers.removing", 0)
    summary = activity.take(110.0)
    assert summary == {
        "interval_s": 10.0,
        "counts": {"containers.removing": 0, "deploy.completed": 60, "deploy.planned": 100},
        "per_s": {"containers.removing": 0.0, "deploy.completed": 6.0, "deploy.planned": 10.0},
        "latency_ms": {"deploy.planned": {"p50": 50.0, "p99": 99.0, "max": 100.0, "n": 100}},
    }
    assert activity.take(120.0) is None  # nothing since: no line
    activity.count("deploy.planned", seconds=-0.5)  # a sender's clock ahead of ours: 0, not negative
    later = activity.take(125.0)
    assert later is not None
    assert later["interval_s"] == 5.0
    assert later["latency_ms"]["deploy.planned"] == {"p50": 0.0, "p99": 0.0, "max": 0.0, "n": 1}


def test_latencies_keep_the_newest_samples_but_exact_counts_and_maximum() -> None:
    activity = Activity(keep=10)
    activity.start(0.0)
    activity.count("x", seconds=5.0)  # the oldest and slowest: overwritten in the ring, still the maximum
    for _ in range(29):
        activity.count("x", seconds=0.001)
    summary = activity.take(1.0)
    assert summary is not None
    assert summary["counts"] == {"x": 30}
    assert summary["latency_ms"]["x"] == {"p50": 1.0, "p99": 1.0, "max": 5000.0, "n": 30}


async def test_a_burst_costs_one_summary_line_at_info(tmp_path: Path) -> None:
    path = tmp_path / "service.log"
    configure_logging("allocator", "r1", log_format="json", level="info", log_file=path)
    try:
        activity = Activity()
        stop = asyncio.Event()
        task = asyncio.create_task(summarize(activity, 3600, stop))
        await asyncio.sleep(0)
        log = structlog.get_logger()
        for _ in range(500):
            activity.count("deploy.planned", seconds=0.02)
            log.debug("deploy.planned")
        stop.set()
        await task
    finally:
        configure_logging("test", "test")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(line["level"], line["event"]) for line in lines] == [("info", "service.summary")]
    assert lines[0]["counts"] == {"deploy.planned": 500}
    assert lines[0]["latency_ms"]["deploy.planned"]["p99"] == 20.0
