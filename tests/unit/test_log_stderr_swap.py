"""Log lines go to the `sys.stderr` of the moment they are written (eru.logging): a caller that swapped stderr for a
while and closed its own (typer's CliRunner in an in-process CLI test) once made every later line of the process
raise "I/O operation on closed file", and a bus responder's error path with it."""

from __future__ import annotations

import io
import sys

import pytest
import structlog

from eru.logging import configure_logging


def test_a_line_after_a_swapped_and_closed_stderr_goes_to_the_current_one(monkeypatch: pytest.MonkeyPatch) -> None:
    borrowed = io.StringIO()
    monkeypatch.setattr(sys, "stderr", borrowed)
    configure_logging("tests", "swap", log_format="json", level="info")
    structlog.get_logger().info("while.borrowed")
    assert "while.borrowed" in borrowed.getvalue()
    borrowed.close()
    current = io.StringIO()
    monkeypatch.setattr(sys, "stderr", current)
    try:
        structlog.get_logger().error("after.closed")  # raised ValueError when the closed file was kept
        assert "after.closed" in current.getvalue()
    finally:
        monkeypatch.undo()
        configure_logging("tests", "pytest", log_format="console", level="debug")  # as tests/conftest.py does
