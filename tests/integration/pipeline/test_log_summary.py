"""Per-deploy lines are at debug; a burst of deploys costs a constant number of info lines, and the periodic
`service.summary` line counts them (eru.activity, docs/operations.md "Logs")."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from pipeline_harness import ScriptedPipeline

from eru.activity import ACTIVITY
from eru.logging import configure_logging
from eru.service import summarize

BURST = 40


async def test_a_burst_of_deploys_writes_o1_info_lines_and_the_summary_counts_them(
    scripted_pipeline: ScriptedPipeline, tmp_path: Path
) -> None:
    pipe, _ = await scripted_pipeline({name: {"cores": 64, "memory": 64 * 1024**3} for name in ("n1", "n2")})
    path = tmp_path / "allocator.log"
    configure_logging("allocator", "r0", log_format="json", level="info", log_file=path)
    try:
        ACTIVITY.take(0.0)  # what earlier work in this process counted is not this test's
        stop = asyncio.Event()
        summaries = asyncio.create_task(summarize(ACTIVITY, 3600, stop))
        ids = await asyncio.gather(
            *(pipe.deploy(count=1, workload={"name": f"w{i}", "image": "busybox"}) for i in range(BURST))
        )
        outcomes = {(await pipe.terminal(deploy_id)).kind for deploy_id in ids}
        stop.set()
        await summaries
    finally:
        configure_logging("test", "test")
    assert outcomes == {"completed"}
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    info = [line["event"] for line in lines if line["level"] == "info"]
    assert "deploy.planned" not in info
    assert "deploy.finished" not in info
    assert len(info) <= 5, info  # O(1): not one line per deploy (40 deploys used to write 80)
    summary = next(line for line in lines if line["event"] == "service.summary")
    assert summary["counts"]["deploy.planned"] == BURST
    assert summary["counts"]["deploy.completed"] == BURST
    assert summary["latency_ms"]["deploy.planned"]["n"] == BURST
