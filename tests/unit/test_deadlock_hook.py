"""The suite-wide hook (tests/conftest.py) fails a test whose output reports a PostgreSQL deadlock."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

PROBE = """
import pytest
import structlog

def test_logs_a_deadlock() -> None:
    structlog.get_logger().error("bus.message.handler_error", reason="DeadlockDetectedError: deadlock detected")

def test_quiet() -> None:
    structlog.get_logger().info("fine")

@pytest.mark.allow_deadlock
def test_expects_one() -> None:
    print("asyncpg.exceptions.DeadlockDetectedError: deadlock detected")
"""


def test_a_deadlock_in_captured_output_fails_only_that_test(tmp_path: Path) -> None:
    shutil.copy(Path(__file__).parents[1] / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_probe.py").write_text(PROBE)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stdout
    assert "1 failed, 2 passed" in done.stdout, done.stdout
    assert "FAILED test_probe.py::test_logs_a_deadlock" in done.stdout
    assert "PostgreSQL deadlock reported" in done.stdout
