"""The supervision behind `eru up` (docs/operations.md, "The supervisor"): every child — service replicas, node
agents, the embedded nats-server and PostgreSQL — is restarted when it exits, after an exponential backoff.

A crash within `stable_seconds` of its start counts as one more round of a crash loop; after `max_quick_crashes`
such rounds in a row the supervisor gives up on that child (and says so, in its output and in `eru status`), the rest
of the stack keeps running. A child that ran for `stable_seconds` or longer before exiting starts a fresh count.

With the defaults (0.5 s doubling to 30 s, 6 rounds) a service that can never start is retried after 0.5, 1, 2, 4 and
8 s and given up on at its 6th crash, about 16 s plus 6 start-up times after the first one.

A child is *ready* once its probe says so (a service's `/readyz`; a server as soon as it started). A child that
exits before it was ready `crash_loop_after` times in a row (3: after 0.5 and 1 s of backoff, about 1.5 s plus 3
start-up times) is *crash-looping*: `eru up` fails naming it and its last error line instead of saying it is up, and
`eru status` shows it (docs/operations.md "Ready, or why not").
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil


@dataclass(frozen=True)
class RestartPolicy:
    """When to restart a child that exited, and when to stop trying."""

    base_seconds: float = 0.5
    factor: float = 2.0
    max_seconds: float = 30.0
    stable_seconds: float = 30.0
    max_quick_crashes: int = 6
    crash_loop_after: int = 3  # exits in a row, each before the child was ready, that make a crash loop

    def delay(self, quick_crashes: int) -> float | None:
        """Seconds to wait before the restart that follows the `quick_crashes`-th crash in a row (1 = the first),
        or None: give up."""
        if quick_crashes >= self.max_quick_crashes:
            return None
        return min(self.max_seconds, self.base_seconds * self.factor ** max(0, quick_crashes - 1))

    def quick_crashes_after(self, previous: int, ran_seconds: float) -> int:
        """The crash-loop count after a crash that ended a run of `ran_seconds`."""
        return previous + 1 if ran_seconds < self.stable_seconds else 1


def identity(pid: int) -> dict[str, Any] | None:
    """What identifies process `pid` beyond its number (which the kernel reuses): its start time and command line;
    None when it is gone."""
    try:
        process = psutil.Process(pid)
        return {"pid": pid, "created": process.create_time(), "cmdline": process.cmdline()}
    except psutil.Error:
        return None


@dataclass
class Child:
    """One supervised process: how to start it, how to see whether it runs, and its restart bookkeeping."""

    name: str
    start: Callable[[], int]  # starts the process, returns its pid
    exit_code: Callable[[], int | None]  # None while it runs
    restarts: int = 0
    quick_crashes: int = 0
    started_at: float = field(default_factory=time.monotonic)
    restart_at: float | None = None  # when it is down and waiting for its restart
    gave_up: str | None = None  # why the supervisor stopped restarting it
    pid: int | None = None
    probe: Callable[[], bool] | None = None  # whether the running process is ready; None: once it started
    ready: bool = False  # its current run has been ready
    unready_crashes: int = 0  # exits in a row, each before the run was ready
    last_code: int | None = None  # exit code of its last exit
    output: Path | None = None  # where it prints outside its log (`<name>.out`): the last error line is there
    output_from: int = 0  # the size of `output` when the current run started

    def launch(self, now: float) -> None:
        """Start a new run: remember where its output begins, then start the process."""
        if self.output is not None:
            with contextlib.suppress(OSError):
                self.output_from = self.output.stat().st_size
        self.ready = False
        self.started_at = now
        self.pid = self.start()


def popen_child(
    name: str,
    launch: Callable[[], subprocess.Popen[bytes]],
    probe: Callable[[], bool] | None = None,
    output: Path | None = None,
) -> tuple[Child, Callable[[], subprocess.Popen[bytes] | None]]:
    """A child run by `launch()` (a service replica), ready when `probe()` says so, printing to `output`; and a
    function giving its current process (to stop it)."""
    current: list[subprocess.Popen[bytes]] = []

    def start() -> int:
        current[:] = [launch()]
        return current[0].pid

    def exit_code() -> int | None:
        return current[0].poll() if current else -1

    child = Child(name, start, exit_code, probe=probe, output=output)
    return child, lambda: current[0] if current else None


def supervise_once(
    children: list[Child], policy: RestartPolicy, report: Callable[[str], None], now: float | None = None
) -> bool:
    """One round: note the children that exited, restart those whose backoff is over. True when something changed
    (a crash, a restart, a give-up), so that the caller records it (stack.json)."""
    now = time.monotonic() if now is None else now
    changed = False
    for child in children:
        if child.gave_up is not None:
            continue
        if child.restart_at is None:
            code = child.exit_code()
            if code is None:
                continue
            ran = now - child.started_at
            child.quick_crashes = policy.quick_crashes_after(child.quick_crashes, ran)
            child.unready_crashes = 0 if child.ready else child.unready_crashes + 1
            child.ready = False
            child.last_code = code
            delay = policy.delay(child.quick_crashes)
            changed = True
            if delay is None:
                child.gave_up = (
                    f"gave up after {child.quick_crashes} crashes in a row, each within "
                    f"{policy.stable_seconds:g} s of its start (last exit code {code})"
                )
                child.pid = None
                report(f"{child.name} exited with code {code}; {child.gave_up}")
                continue
            child.restart_at = now + delay
            report(f"{child.name} exited with code {code} after {ran:.1f} s; restarting in {delay:g} s")
            continue
        if now >= child.restart_at:
            child.restart_at = None
            try:
                child.launch(now)
            except Exception as error:  # a start that fails counts as a crash of the new run
                report(f"{child.name} did not start: {type(error).__name__}: {error}")
                child.pid = None
                child.started_at = now
                child.restart_at = None
                child.exit_code = _failed(child.exit_code)
            child.restarts += 1
            changed = True
            report(f"{child.name} restarted (restart {child.restarts}, pid {child.pid})")
    return changed


def _failed(original: Callable[[], int | None]) -> Callable[[], int | None]:
    """An `exit_code` that reports one failed start, then defers to `original` again."""
    pending = [True]

    def exit_code() -> int | None:
        if pending:
            pending.clear()
            return -1
        with contextlib.suppress(Exception):
            return original()
        return -1

    return exit_code


def probe_readiness(children: list[Child]) -> bool:
    """Ask every running child that has not been ready since its start whether it is now; True when one became
    ready (its crash-loop count starts afresh)."""
    changed = False
    for child in children:
        if child.ready or child.gave_up is not None or child.restart_at is not None or child.pid is None:
            continue
        if child.probe is None or child.probe():
            child.ready = True
            child.unready_crashes = 0
            changed = True
    return changed


def crash_loop(child: Child, policy: RestartPolicy) -> str | None:
    """Why `child` is crash-looping (it keeps exiting before it is ready, or the supervisor gave up on it), or None."""
    if child.gave_up is not None:
        return child.gave_up
    if child.unready_crashes >= policy.crash_loop_after:
        return f"exited {child.unready_crashes} times in a row before it was ready (last exit code {child.last_code})"
    return None


@dataclass(frozen=True)
class Startup:
    """Where the start of a stack stands: the children crash-looping (name → why) and those not ready yet."""

    looping: dict[str, str]
    waiting: list[str]

    @property
    def ready(self) -> bool:
        """Every child is ready."""
        return not self.looping and not self.waiting


def startup(children: list[Child], policy: RestartPolicy) -> Startup:
    """The crash-looping children and those not ready yet, in start order."""
    looping = {c.name: reason for c in children if (reason := crash_loop(c, policy)) is not None}
    waiting = [c.name for c in children if c.name not in looping and not c.ready]
    return Startup(looping, waiting)
