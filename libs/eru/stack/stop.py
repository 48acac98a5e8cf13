"""`eru down`: stop every process of a stack, even when its supervisor was killed with -9 (docs/operations.md).

The processes of a stack are found two ways, and a process is only ever signalled when it is certainly the stack's:

* the identities `eru up` recorded in stack.json (pid + start time: a pid the kernel gave to another process since
  has another start time, and is left alone);
* a scan for processes whose environment says `ERU_STACK_MEMBER=<this state directory>` (every service the
  supervisor starts carries it, and nothing else) or whose command line names the stack's nats or PostgreSQL
  directory (the servers) — which catches a replica restarted in the instant before the supervisor died, before
  stack.json named it.

`stop_stack` asks a live supervisor to stop first (it drains the services), then stops whatever is left (SIGTERM, or
SIGINT — fast shutdown — for PostgreSQL; SIGKILL after the timeout) and returns only when every one is gone and the
stack's ports are free, so `eru down && eru up` always works.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from eru.stack.info import MEMBER_ENV, STACK_FILE, StackError, StackInfo


@dataclass
class StopReport:
    """What `stop_stack` did."""

    supervisor: str  # "stopped", "dead" (killed earlier: orphans cleaned up) or "absent"
    stopped: list[str] = field(default_factory=list)  # "name (pid N)" of each process ended here
    ports: list[int] = field(default_factory=list)


def _matches(process: psutil.Process, recorded: dict[str, Any]) -> bool:
    with contextlib.suppress(psutil.Error):
        return abs(process.create_time() - float(recorded["created"])) < 0.01
    return False


def _recorded(info: StackInfo) -> dict[str, psutil.Process]:
    """The recorded processes that are still the ones `eru up` started (same pid AND start time)."""
    found: dict[str, psutil.Process] = {}
    for name, recorded in info.identities.items():
        if name == "supervisor":
            continue
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(int(recorded["pid"]))
            if _matches(process, recorded):
                found[f"{name} (pid {process.pid})"] = process
    return found


def _belongs(process: psutil.Process, state_dir: Path) -> bool:
    """Whether `process` is one of this stack's: a service started with ERU_STACK_MEMBER=<state_dir>, or a server whose
    command line names the stack's nats or postgres directory."""
    with contextlib.suppress(psutil.Error):
        if process.pid == os.getpid():
            return False
        cmdline = process.cmdline()
        markers = (str(state_dir / "nats"), str(state_dir / "postgres"))
        if any(marker in argument for argument in cmdline for marker in markers):
            return True
        return process.environ().get(MEMBER_ENV) == str(state_dir)
    return False


def stack_processes(state_dir: Path, info: StackInfo | None) -> dict[str, psutil.Process]:
    """Every live process of the stack under `state_dir` (recorded or found), by a readable label."""
    found = _recorded(info) if info is not None else {}
    known = {process.pid for process in found.values()}
    for process in psutil.process_iter(["name"]):
        if process.pid not in known and _belongs(process, state_dir):
            with contextlib.suppress(psutil.Error):
                found[f"{process.name()} (pid {process.pid})"] = process
    return found


def _terminate(processes: dict[str, psutil.Process], timeout: float) -> None:
    children: list[psutil.Process] = []
    for process in processes.values():
        with contextlib.suppress(psutil.Error):
            children += process.children(recursive=True)
            # PostgreSQL: SIGINT is its fast shutdown; SIGTERM would wait for every client to leave
            process.send_signal(signal.SIGINT if process.name().startswith("postgres") else signal.SIGTERM)
    _gone, alive = psutil.wait_procs(list(processes.values()), timeout=timeout)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=10)
    _gone, alive = psutil.wait_procs(children, timeout=5)
    for child in alive:
        with contextlib.suppress(psutil.Error):
            child.kill()
    psutil.wait_procs(alive, timeout=5)


def port_free(port: int) -> bool:
    """Whether a server could bind `port` on loopback now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def stop_stack(state_dir: Path, *, timeout: float = 30.0) -> StopReport:
    """Stop the stack under `state_dir` and everything it left behind; `StackError` if something survives."""
    state_dir = state_dir.resolve()
    info = StackInfo.load(state_dir)
    report = StopReport(supervisor="absent")
    supervisor = info.identities.get("supervisor") if info is not None else None
    if info is not None and supervisor is not None:
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(int(supervisor["pid"]))
            if _matches(process, supervisor):
                process.send_signal(signal.SIGTERM)  # it stops its children in order, draining the services
                process.wait(timeout + 30)
                report.supervisor = "stopped"
        if report.supervisor != "stopped":
            report.supervisor = "dead"
    leftovers = stack_processes(state_dir, info)
    if leftovers:
        _terminate(leftovers, timeout)
        report.stopped = sorted(leftovers)
    survivors = [label for label, process in leftovers.items() if process.is_running() and not _zombie(process)]
    if survivors:
        raise StackError(f"still running after eru down: {', '.join(survivors)}")
    ports = sorted(set(info.ports.values())) if info is not None else []
    deadline = time.monotonic() + timeout
    while any(not port_free(port) for port in ports) and time.monotonic() < deadline:
        time.sleep(0.1)
    taken = [port for port in ports if not port_free(port)]
    if taken:
        raise StackError(f"ports still taken after eru down: {', '.join(map(str, taken))}")
    report.ports = ports
    with contextlib.suppress(FileNotFoundError):
        (state_dir / STACK_FILE).unlink()
    return report


def _zombie(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return process.status() == psutil.STATUS_ZOMBIE
    return True
