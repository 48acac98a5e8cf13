"""The soak bench's stdout carries only its JSON lines (docs/performance.md): its clients' log lines and `eru down`'s
report go to stderr."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import structlog
from bench.soak import quiet_logging, stop_stack


def test_client_log_lines_go_to_stderr_not_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    structlog.reset_defaults()  # unconfigured, as the bench starts: structlog would print every level to stdout
    quiet_logging()
    try:
        log = structlog.get_logger()
        log.debug("bus.connected", name="soak-client")
        log.info("bus.closed")
        log.warning("bench.warned", what="kept")
        captured = capsys.readouterr()
        assert captured.out == ""
        lines = [json.loads(line) for line in captured.err.splitlines()]
        assert [line["event"] for line in lines] == ["bench.warned"]
    finally:
        structlog.reset_defaults()


def test_eru_down_reports_on_stderr(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    stop_stack(tmp_path, {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)})
    captured = capfd.readouterr()
    assert captured.out == ""
    assert "nothing running under" in captured.err
