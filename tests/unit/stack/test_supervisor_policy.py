"""The supervisor's restart policy and one round of supervision (eru.stack.supervisor), with scripted children."""

from __future__ import annotations

import pytest

from eru.stack.supervisor import Child, RestartPolicy, supervise_once


def test_backoff_doubles_to_its_ceiling_and_gives_up_after_the_crash_loop() -> None:
    policy = RestartPolicy(base_seconds=0.5, factor=2, max_seconds=3, max_quick_crashes=6)
    assert [policy.delay(n) for n in range(1, 7)] == [0.5, 1, 2, 3, 3, None]


def test_a_stable_run_starts_a_fresh_count() -> None:
    policy = RestartPolicy(stable_seconds=30)
    assert policy.quick_crashes_after(4, ran_seconds=2) == 5
    assert policy.quick_crashes_after(4, ran_seconds=31) == 1


class Script:
    """A child whose process 'runs' until the test says it exited."""

    def __init__(self) -> None:
        self.code: int | None = None
        self.starts = 0

    def start(self) -> int:
        self.starts += 1
        self.code = None
        return 1000 + self.starts

    def exit_code(self) -> int | None:
        return self.code


def test_a_crashed_child_is_restarted_after_its_backoff_and_counted() -> None:
    script = Script()
    child = Child("allocator", script.start, script.exit_code, started_at=0.0)
    lines: list[str] = []
    policy = RestartPolicy(base_seconds=0.5)
    assert not supervise_once([child], policy, lines.append, now=1.0)
    script.code = -9
    assert supervise_once([child], policy, lines.append, now=2.0)
    assert child.restart_at == 2.5
    assert script.starts == 0
    assert not supervise_once([child], policy, lines.append, now=2.4)
    assert supervise_once([child], policy, lines.append, now=2.5)
    assert (script.starts, child.restarts, child.pid) == (1, 1, 1001)
    assert lines == [
        "allocator exited with code -9 after 2.0 s; restarting in 0.5 s",
        "allocator restarted (restart 1, pid 1001)",
    ]


def test_the_supervisor_gives_up_on_a_crash_loop_and_says_so() -> None:
    script = Script()
    child = Child("eviction", script.start, script.exit_code, started_at=0.0)
    lines: list[str] = []
    policy = RestartPolicy(base_seconds=1, max_quick_crashes=3)
    now = 0.0
    for _ in range(10):
        script.code = 1
        now += 0.1
        supervise_once([child], policy, lines.append, now=now)
        now += 5
        supervise_once([child], policy, lines.append, now=now)
    assert child.restarts == 2
    assert child.gave_up is not None
    assert "gave up after 3 crashes in a row" in child.gave_up
    assert lines[-1].startswith("eviction exited with code 1; gave up after 3 crashes")


def test_a_start_that_raises_counts_as_a_crash() -> None:
    calls: list[int] = []

    def start() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("port in use")
        return 7

    child = Child("nats-server", start, lambda: -1, started_at=0.0)
    lines: list[str] = []
    policy = RestartPolicy(base_seconds=1)
    supervise_once([child], policy, lines.append, now=1.0)  # exited
    supervise_once([child], policy, lines.append, now=2.0)  # restart raises
    assert "did not start: OSError: port in use" in lines[1]
    supervise_once([child], policy, lines.append, now=2.1)  # the failed start is seen as a crash
    assert child.restart_at == pytest.approx(4.1)
