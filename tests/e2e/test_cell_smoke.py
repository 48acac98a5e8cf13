"""The cell bench in small (`python -m bench.bench_cell`, docs/performance.md "A cell, end to end"): `eru up` with
1,000 sim nodes of 32 cores, 2,000 containers of 0.1 core and 64 MiB sent by the independent nats-py client
(bench/cell_client.py) in requests of 100 — every request answered, every deploy completed, every container running
in the ledger, the allocation invariant holding (bench.faults.checks). Completeness only: speed is the bench's."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

NODES = 1000
CONTAINERS = 2000


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_cell_of_1000_sim_nodes_places_and_starts_every_container() -> None:
    command = [
        sys.executable, "-m", "bench.bench_cell", "--nodes", str(NODES), "--containers", str(CONTAINERS),
        "--settle-seconds", "0", "--idle-seconds", "1", "--steady-seconds", "1", "--register-within", "120",
        "--within", "150",
        "--start-within", "60",
    ]  # fmt: skip
    bench = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2]
    )
    try:
        stdout, stderr = bench.communicate(timeout=270)
    except subprocess.TimeoutExpired:
        bench.send_signal(signal.SIGINT)  # the bench stops its stack (`eru down`) on the way out
        stdout, stderr = bench.communicate(timeout=25)
    assert bench.returncode == 0, f"exit {bench.returncode}; stderr: {stderr[-3000:]}"
    report = json.loads(stdout)
    (cell,) = report["results"]
    assert cell["nodes"] == NODES
    assert (cell["requests"], cell["answered"], cell["refused"]) == (CONTAINERS // 100, CONTAINERS // 100, 0)
    assert cell["outcomes"] == {"completed": CONTAINERS // 100, "partial": 0, "failed": 0}
    assert cell["ledger"]["rows"] == CONTAINERS
    assert cell["ledger"]["running"] == CONTAINERS
    assert cell["invariant_violations"] == []
    assert cell["invariant_holds"]
    assert cell["complete"]
    assert report["complete"]
