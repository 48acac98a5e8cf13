"""Suite-wide checks: a PostgreSQL deadlock anywhere in a test's captured output fails that test; and, for parallel
runs (`pytest -n 2 --dist loadgroup`, docs/testing.md "Parallel runs"), the tests of a module that share a module- or
class-scoped fixture stay together on one worker.

A deadlock is retried by the consumers, so the test that hit one would otherwise pass while the services it drives
stalled for `deadlock_timeout` (docs/store.md "Transactions and locks"). The hook reads what pytest captured for the
test (stdout, stderr, log records) in every phase; a test that expects one names it in `allow_deadlock` (marker).
"""

from __future__ import annotations

import os
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


SHARED_SCOPES = ("class", "module", "package")
DOCKER_GROUP = "docker-engine"


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (its own collection hook names each test's group)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group (`xdist_group`, used by `--dist loadgroup`) the tests that must not run beside some others.

    - Every test on the Docker engine (`docker_engine` fixture) in one group: they share the one engine, and a node
      agent reports every eru container of another node it finds there as `foreign` (what a real node's engine
      shows), so a test's agent would report the containers of a test running beside it.
    - Every test that uses a class-, module- or package-scoped fixture, by its file: such a fixture is one stack or
      browser the module's tests use in order (the last one often stops it); split over two workers each would
      start its own copy and a test would meet another's state.
    """
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        if "docker_engine" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(DOCKER_GROUP))
            continue
        info = getattr(item, "_fixtureinfo", None)
        definitions = info.name2fixturedefs.values() if info is not None else []
        if any(fixture.scope in SHARED_SCOPES for chain in definitions for fixture in chain):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


@pytest.hookimpl(tryfirst=True)  # before the xdist worker sends its collection to the controller
def pytest_collection_finish(session: pytest.Session) -> None:
    """Under `--dist loadgroup`, refuse to run when the groups did not reach xdist: it reads them from a suffix it adds
    to the test ids, which pytest 9.2 no longer lets it add (pytest-xdist#1386), and it then spreads grouped tests
    over the workers without a word."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    lost = [
        item.nodeid
        for item in session.items
        if (mark := item.get_closest_marker("xdist_group")) is not None and not item.nodeid.endswith(f"@{mark.args[0]}")
    ]
    if lost:
        reason = (
            f"--dist loadgroup would not keep {len(lost)} grouped test(s) together (pytest-xdist#1386 with pytest "
            f">= 9.2; docs/testing.md): {lost[0]}"
        )
        os.write(2, f"\n*** {reason} ***\n".encode())  # a worker's own errors reach the controller as "no workers"
        raise pytest.UsageError(reason)


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
