"""The embedded local stack behind `eru up`: a real nats-server, a real PostgreSQL, and the four services as processes.

Everything lives under one state directory (`.state/` by default) so that the stack survives a restart:
`nats/` (JetStream store), `postgres/` (data directory), `logs/` (one file per process) and `stack.json` (what runs
where, for `eru status` and `eru down`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from eru.errors import EruError

SERVICES = ("allocator", "distributor", "node-agent", "eviction")
STACK_FILE = "stack.json"
# Set (to the resolved state directory) in the environment of every process the supervisor starts, so that
# `eru down` finds the stack's processes even when the supervisor died before recording one (eru.stack.stop).
MEMBER_ENV = "ERU_STACK_MEMBER"


class StackError(EruError):
    """The stack could not start or stop; the message names the component and the reason."""

    code = "stack_error"


@dataclass
class StackInfo:
    """What `eru up` started, written to `<state_dir>/stack.json`."""

    state_dir: str
    nats_url: str
    database_dsn: str
    supervisor_pid: int
    embedded_nats: bool
    embedded_postgres: bool
    processes: dict[str, int] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)
    # pids of the embedded servers (nats-server, postgres), so that a stop can be checked to leave nothing behind
    server_pids: dict[str, int] = field(default_factory=dict)
    # process (as in `processes`) → its Prometheus endpoint, `http://127.0.0.1:<port>/metrics` (docs/operations.md)
    metrics: dict[str, str] = field(default_factory=dict)
    # the web console's address (docs/console.md; log in with `eru console url`), or None without a console
    console_url: str | None = None
    # name (a process, a server, "supervisor") → {"pid", "created", "cmdline"}: `eru down` signals a pid only while
    # it still has this start time (eru.stack.stop)
    identities: dict[str, dict[str, Any]] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)  # "nats", "postgres" → port of the embedded servers
    restarts: dict[str, int] = field(default_factory=dict)  # process or server → restarts by the supervisor
    gave_up: dict[str, str] = field(default_factory=dict)  # process or server → why it is no longer restarted
    # the settings the stack's processes run with that `eru status` compares storage against (retention, log
    # rotation): from the environment of `eru up`, which every process inherits
    settings: dict[str, Any] = field(default_factory=dict)
    # "starting" until every process is ready, then "up"; "failed" when one crash-looped or missed the readiness
    # deadline (`failure` says which and its last error line; docs/operations.md "Ready, or why not")
    state: str = "up"
    failure: str | None = None
    # process → {"reason", "last_error"} while it exits before it is ready, again and again (or was given up on)
    crash_loops: dict[str, dict[str, str]] = field(default_factory=dict)

    def supervisor_alive(self) -> bool:
        """Whether the supervisor that wrote this file still runs (same pid and, when recorded, same start time)."""
        recorded = self.identities.get("supervisor")
        if recorded is None:
            return pid_alive(self.supervisor_pid)
        try:
            import psutil

            process = psutil.Process(self.supervisor_pid)
            return process.status() != psutil.STATUS_ZOMBIE and abs(process.create_time() - recorded["created"]) < 0.01
        except psutil.Error:
            return False

    def save(self) -> None:
        """Write the file atomically."""
        path = Path(self.state_dir) / STACK_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.chmod(0o600)  # the NATS URL may carry the admin's credentials
        tmp.replace(path)

    @classmethod
    def load(cls, state_dir: Path) -> StackInfo | None:
        """The running stack's info, or None when no stack file is there."""
        path = state_dir / STACK_FILE
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        known = {f.name for f in fields(cls)}
        # a stack.json written by a newer or older eru: keep what this version knows
        return cls(**{key: value for key, value in data.items() if key in known})


def storage_settings() -> dict[str, Any]:
    """The settings `eru status` measures storage against, as this process (and the stack it starts) reads them."""
    from eru.settings import load_settings

    settings = load_settings()
    return {
        "retention_seconds": settings.retention_seconds,
        "log_max_bytes": settings.log_max_bytes,
        "log_backups": settings.log_backups,
    }


def ensure_port_free(port: int, what: str) -> None:
    """Raise a one-line `StackError` when `port` on loopback is taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            raise StackError(
                f"{what}: port {port} on 127.0.0.1 is already in use (choose another with its option)"
            ) from None


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (and is not a zombie of ours)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        status = Path(f"/proc/{pid}/status").read_text()
        if "\nState:\tZ" in status:
            return False
    return True


def python_module(module: str, *args: str) -> list[str]:
    """The command line that runs `module` with this interpreter, in safe-path mode (`-P`): `python -m` would put the
    working directory first on the import path, and an `eru` folder there (the parent of a clone named `eru`) would
    shadow the installed package in every process the stack starts (docs/operations.md)."""
    return [sys.executable, "-P", "-m", module, *args]


def service_command(service: str, extra: list[str] | None = None) -> list[str]:
    """The command line of one service replica."""
    return python_module("eru_" + service.replace("-", "_"), *(extra or []))


@contextlib.contextmanager
def open_private_log(path: Path) -> Iterator[Any]:
    """`path` opened for appending, created readable by the owner only (0600) in a 0700 directory."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.parent.chmod(0o700)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "ab") as handle:
        yield handle


def start_service(
    service: str, env: dict[str, str], log_path: Path, extra: list[str] | None = None
) -> subprocess.Popen[bytes]:
    """Start one replica in its own session (so a Ctrl-C in the terminal reaches only the supervisor).

    The service writes its log lines to `log_path` itself, rotated (ERU_LOG_FILE, docs/operations.md "Logs"); what
    it prints outside logging (a bad setting at start, an interpreter crash) goes to `output_path(log_path)`."""
    with open_private_log(output_path(log_path)) as log_file:
        return subprocess.Popen(
            service_command(service, extra),
            env={**os.environ, **env, "ERU_LOG_FILE": str(log_path)},
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            umask=0o077,  # the log files it writes (and rotates) are its owner's only (docs/security.md)
        )


def stop_processes(processes: dict[str, subprocess.Popen[bytes]], timeout: float = 15.0) -> None:
    """SIGTERM every process, wait up to `timeout` for them to drain, then SIGKILL what is left."""
    for process in processes.values():
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for process in processes.values():
        remaining = max(0.1, deadline - time.monotonic())
        try:
            process.wait(remaining)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.1) -> None:
    """Poll `predicate()` until true; `StackError` naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise StackError(f"{what} did not become ready within {timeout:.0f} s")


def output_path(log_path: Path) -> Path:
    """Where a service's own output (not its log lines) goes: `<name>.out` next to `<name>.log`."""
    return log_path.with_suffix(".out")


def last_error_line(output: Path, since: int = 0) -> str | None:
    """The last non-blank line a process wrote to its output file (`<name>.out`) after byte `since` (where its
    latest run began): an interpreter's traceback ends with the exception, a bad setting with its one line. Reads at
    most the last 64 KiB; None when it wrote nothing."""
    try:
        with output.open("rb") as handle:
            end = handle.seek(0, 2)
            start = max(since, end - (1 << 16)) if since <= end else max(0, end - (1 << 16))
            handle.seek(start)
            data = handle.read()
    except OSError:
        return None
    lines = [line.strip() for line in data.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else None


def tail(path: Path, lines: int = 5) -> Iterator[str]:
    """The last lines of a log file (and of the process's output beside it), for error messages."""
    for candidate in (path, output_path(path)) if path.suffix == ".log" else (path,):
        if candidate.exists() and candidate.stat().st_size:
            yield from candidate.read_text(errors="replace").splitlines()[-lines:]
