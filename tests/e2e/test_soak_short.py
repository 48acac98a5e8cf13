"""The soak bench in small (`python -m bench.soak`, docs/performance.md): `eru up` under steady churn for ten
minutes with a one-minute retention and 256 KiB logs — nothing lost, no deadlock, the allocation invariant holds,
and storage stays bounded: retention drops history partitions, PostgreSQL and the streams stop growing, logs rotate
within their cap. (Issue 19's "10-minute version in CI"; latency is a bench figure, not asserted here.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

DURATION = 600
RATE = 8
RETENTION = 60
LOG_CAP = 256 * 1024


@pytest.mark.slow
@pytest.mark.timeout(DURATION + 240)
def test_a_short_soak_loses_nothing_and_keeps_storage_bounded(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "bench.soak", "--duration", str(DURATION), "--rate", str(RATE), "--live", "150",
        "--sim-nodes", "4", "--sample", "15", "--retention", str(RETENTION), "--log-max-bytes", str(LOG_CAP),
        "--state-dir", str(tmp_path / "stack"),
        # per-request lines are at debug (an info log is one summary line a minute and never reaches the cap):
        # debug writes enough to rotate within 10 minutes
        "--log-level", "debug",
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=DURATION + 220, cwd=Path(__file__).parents[2]
    )
    # stdout is JSON lines only (a debug or `eru down` line there would break `bench.soak_report`)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    samples = [line for line in lines if "t" in line]
    summaries = [line["summary"] for line in lines if "summary" in line]
    assert len(summaries) == 1, f"exit {done.returncode}, no summary; stderr: {done.stderr[-3000:]}"
    (summary,) = summaries
    checks = summary["checks"]
    assert checks["nothing_lost"], summary["lost"]
    assert checks["no_deadlock"], summary
    assert checks["invariant"], summary["invariant_violations"]
    assert checks["logs_within_cap"], summary["largest_log_file_bytes"]
    assert summary["accepted"] >= RATE * DURATION * 0.9
    end = samples[-1]
    # retention ran: history partitions were dropped, and what is kept is what the last few minutes finished
    assert end["tables"]["retention_drops"]["rows"] >= 2, end["tables"]
    finished_per_second = 5 * RATE  # at most 5 containers per deploy
    kept_seconds = RETENTION + 2 * 60 + 60  # retention + partition width + passes and grace, generously
    assert end["tables"]["containers_history"]["rows"] <= finished_per_second * kept_seconds
    assert end["tables"]["containers"]["rows"] <= 150 + finished_per_second * 60  # live + at most a minute's finished
    # streams keep `retention` seconds of messages: once that is reached they stop growing
    streams = [sum(v for k, v in s["streams"].items() if k != "ERU_METRICS") for s in samples]
    middle = streams[len(streams) // 2]
    assert streams[-1] <= 1.3 * middle, streams
    # so does PostgreSQL once the first retention window has passed: minute 10 against minute 5
    database = [s["storage_bytes"]["postgres"] for s in samples]
    assert database[-1] <= 1.3 * database[len(database) // 2], database
    assert all(size <= LOG_CAP for size in end["logs"].values()), end["logs"]
    rotated = [name for name in end["logs"] if name.endswith(".log.1")]
    assert rotated, "the allocator's log should have rotated at 256 KiB"
