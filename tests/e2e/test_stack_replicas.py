"""`eru up --replicas SERVICE=N --sim-node-cpus --sim-node-memory` as a user runs it: bad values are one line naming
the option and start nothing; good ones run that many processes and sim nodes of that size (docs/replicas.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eru.testing.nats_server import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ERU = [sys.executable, "-m", "eru.cli"]


def eru(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ERU, *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, "COLUMNS": "200"}
    )


@pytest.fixture
def state_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="eru-replicas-"))
    try:
        yield path / "state"
    finally:
        eru("down", "--state-dir", str(path / "state"), timeout=120)
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--replicas", "scheduler=2"], "error: --replicas: 'scheduler=2': unknown service 'scheduler'"),
        (["--replicas", "allocator"], "error: --replicas: 'allocator' is not SERVICE=N"),
        (["--replicas", "allocator=0"], "error: --replicas: 'allocator=0': the count must be between 1 and 32"),
        (["--sim-node-cpus", "0"], "error: --sim-node-cpus: 0 cores: must be between 1 and 4096"),
        (["--sim-node-memory", "lots"], "error: --sim-node-memory: cannot read 'lots' as bytes"),
    ],
)
def test_bad_sizing_is_one_line_naming_the_option(state_dir: Path, args: list[str], line: str) -> None:
    result = eru("up", "--state-dir", str(state_dir), *args)
    assert result.returncode == 2
    assert result.stderr.strip().startswith(line), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stdout + result.stderr
    assert not state_dir.exists()  # nothing started


def test_up_runs_the_replicas_and_sim_nodes_asked_for(state_dir: Path) -> None:
    ports = ["--nats-port", str(free_port()), "--postgres-port", str(free_port()), "--no-console"]
    sizing = ["--replicas", "allocator=2", "--replicas", "node-agent=2", "--sim-nodes", "5"]
    sizing += ["--sim-node-cpus", "32", "--sim-node-memory", "64GiB"]
    started = eru("up", "--state-dir", str(state_dir), "--detach", *ports, *sizing, timeout=120)
    assert started.returncode == 0, started.stdout + started.stderr
    info = json.loads((state_dir / "stack.json").read_text())
    assert set(info["processes"]) == {
        "allocator-1",
        "allocator-2",
        "distributor",
        "eviction",
        "node-agent-sim-1",
        "node-agent-sim-2",
    }

    deadline = time.monotonic() + 90
    nodes: list[dict[str, Any]] = []
    while time.monotonic() < deadline and len(nodes) < 5:
        listed = eru("node", "ls", "--state-dir", str(state_dir), "-o", "json")
        nodes = json.loads(listed.stdout)["nodes"] if listed.returncode == 0 else []
        time.sleep(0.5)
    assert sorted(node["name"] for node in nodes) == ["sim1-001", "sim1-002", "sim1-003", "sim2-001", "sim2-002"]
    assert {len(node["cpu_map"]) for node in nodes} == {32}, nodes[0]
    assert {node["memory"] for node in nodes} == {64 * 1024**3}, nodes[0]

    deadline = time.monotonic() + 60
    status = eru("status", "--state-dir", str(state_dir), "-o", "json")
    while time.monotonic() < deadline and status.stdout.count("allocator-") < 2:
        time.sleep(0.5)
        status = eru("status", "--state-dir", str(state_dir), "-o", "json")
    allocator = next(s for s in json.loads(status.stdout)["services"] if s["name"] == "allocator")
    assert sorted(i["replica"] for i in allocator["instances"]) == ["allocator-1", "allocator-2"]

    deployed = eru(
        "deploy", "--state-dir", str(state_dir), "--pod", "default", "--image", "nginx:1", "--count", "4",
        "--cpu", "2", "--memory", "1GiB",
    )  # fmt: skip
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    stopped = eru("down", "--state-dir", str(state_dir), timeout=120)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
