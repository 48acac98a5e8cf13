"""`eru status` finds every running replica: a second allocator shows up as a second row."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pipeline_processes import Processes

from eru.testing.pytest_postgres import postgres_dsn, postgres_server, postgres_template

__all__ = ["postgres_dsn", "postgres_server", "postgres_template"]
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def processes(nats_url: str, postgres_dsn: str, tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(nats_url, postgres_dsn, tmp_path / "logs")
    try:
        yield procs
    finally:
        procs.stop_all()


def _allocator_rows(nats_url: str, dsn: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-m", "eru.cli", "status", "--nats", nats_url, "--database", dsn, "--timeout", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )
    return sorted(line.split("│")[2].strip() for line in result.stdout.splitlines() if "│ allocator" in line)


def _wait_for_rows(nats_url: str, dsn: str, wanted: list[str], processes: Processes) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if _allocator_rows(nats_url, dsn) == wanted:
            return
        time.sleep(0.5)
    raise AssertionError(f"eru status never showed allocators {wanted}:\n{processes.logs()}")


def test_status_sees_a_second_allocator_replica(nats_url: str, postgres_dsn: str, processes: Processes) -> None:
    processes.start("alloc-a", "eru_allocator")
    _wait_for_rows(nats_url, postgres_dsn, ["alloc-a"], processes)
    processes.start("alloc-b", "eru_allocator")
    _wait_for_rows(nats_url, postgres_dsn, ["alloc-a", "alloc-b"], processes)
    processes.kill9("alloc-a")
    _wait_for_rows(nats_url, postgres_dsn, ["alloc-b"], processes)
