"""Suite-wide checks: a PostgreSQL deadlock anywhere in a test's captured output fails that test.

A deadlock is retried by the consumers, so the test that hit one would otherwise pass while the services it drives
stalled for `deadlock_timeout` (docs/store.md "Transactions and locks"). The hook reads what pytest captured for the
test (stdout, stderr, log records) in every phase; a test that expects one names it in `allow_deadlock` (marker).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

DEADLOCK_MARKS = ("DeadlockDetectedError", "deadlock detected")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "allow_deadlock: the test provokes a PostgreSQL deadlock on purpose")
    # Log as every service does (eru.logging: plain tracebacks, redaction), never with structlog's default renderer:
    # that one draws each traceback with rich, locals included, synchronously on the event loop. Under load it held
    # the loop for 4-8 s while a handler bug was logged, so another message's dead-letter publish, whose ack had
    # arrived, timed out after 5 s and that message was handled twice (test_bus_consumer's poison test, failing in
    # the integration suite under CPU load).
    from eru.logging import configure_logging

    configure_logging("tests", "pytest", log_format="console", level="debug")


def deadlock_lines(text: str) -> list[str]:
    """The lines of captured output that report a PostgreSQL deadlock."""
    return [line for line in text.splitlines() if any(mark in line for mark in DEADLOCK_MARKS)]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.outcome != "passed" or item.get_closest_marker("allow_deadlock") is not None:
        return
    # report.sections accumulates the earlier phases' output too: read only this phase's
    found = [
        line for name, content in report.sections if name.endswith(report.when) for line in deadlock_lines(content)
    ]
    if found:
        report.outcome = "failed"
        report.longrepr = f"PostgreSQL deadlock reported in the test's output ({len(found)} line(s)):\n" + "\n".join(
            found[:5]
        )
