"""The supervisor of `eru up` with real processes: a killed service comes back and is counted, a killed supervisor
leaves nothing that `eru down` cannot stop, and `eru down && eru up` always works (docs/operations.md)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from eru.stack.stop import port_free
from eru.testing.nats_server import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ERU = [sys.executable, "-m", "eru.cli"]


def _eru(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ERU_")}
    return subprocess.run([*ERU, *args], capture_output=True, text=True, env={**env, "COLUMNS": "250"}, timeout=150)


def _wait_for(predicate: Any, seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


def _members(state_dir: Path) -> list[psutil.Process]:
    """Every live process of the stack: named by its command line (servers, supervisor) or its environment."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE or process.pid == os.getpid():
                continue
            in_cmdline = str(state_dir) in " ".join(process.info["cmdline"] or [])
            if in_cmdline or process.environ().get("ERU_STACK_MEMBER") == str(state_dir):
                found.append(process)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def stack_dir() -> Iterator[tuple[Path, list[str]]]:
    root = Path(tempfile.mkdtemp(prefix="eru-e2e-sup-"))
    state_dir = root / "state"
    ports = ["--nats-port", str(free_port()), "--postgres-port", str(free_port())]
    ports += ["--console-port", str(free_port())]
    try:
        yield state_dir, ports
    finally:
        for process in _members(state_dir):
            process.kill()
        shutil.rmtree(root, ignore_errors=True)


def _up(state_dir: Path, ports: list[str]) -> dict[str, Any]:
    result = _eru("up", "--detach", "--state-dir", str(state_dir), "--sim-nodes", "0", *ports)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads((state_dir / "stack.json").read_text())


def _status(state_dir: Path) -> dict[str, Any]:
    result = _eru("status", "--state-dir", str(state_dir), "-o", "json")
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def _allocator(document: dict[str, Any]) -> dict[str, Any] | None:
    services = {service["name"]: service for service in document["services"]}
    instances = services["allocator"]["instances"]
    return instances[0] if instances and instances[0]["state"] == "ready" else None


def test_a_killed_service_comes_back_and_a_killed_supervisor_leaves_nothing_behind(
    stack_dir: tuple[Path, list[str]],
) -> None:
    state_dir, ports = stack_dir
    info = _up(state_dir, ports)
    _wait_for(lambda: _allocator(_status(state_dir)), 90, "the allocator to be ready")
    first = info["processes"]["allocator"]
    os.kill(first, signal.SIGKILL)

    def restarted() -> dict[str, Any] | None:
        current = json.loads((state_dir / "stack.json").read_text())
        pid = current["processes"].get("allocator")
        return current if current["restarts"].get("allocator") == 1 and pid not in (None, first) else None

    info = _wait_for(restarted, 60, "the supervisor to restart the allocator")
    allocator = _wait_for(lambda: _allocator(_status(state_dir)), 90, "the restarted allocator to be ready")
    assert allocator["restarts"] == 1
    text = _eru("status", "--state-dir", str(state_dir)).stdout
    assert any("allocator-1" in line and " 1 " in line for line in text.splitlines()), text

    # the supervisor dies without a chance to clean up: `eru down` still stops everything and frees the ports
    members = _members(state_dir)
    assert len(members) >= 6  # supervisor, nats-server, postgres (+ its backends), three services
    os.kill(info["supervisor_pid"], signal.SIGKILL)
    _wait_for(lambda: not psutil.pid_exists(info["supervisor_pid"]), 10, "the supervisor to die")
    down = _eru("down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stdout + down.stderr
    assert "supervisor was gone" in down.stdout
    assert _members(state_dir) == []
    assert all(port_free(int(port)) for port in ports[1::2])
    assert not (state_dir / "stack.json").exists()


def test_down_then_up_always_works(stack_dir: tuple[Path, list[str]]) -> None:
    state_dir, ports = stack_dir
    for _ in range(2):
        _up(state_dir, ports)
        down = _eru("down", "--state-dir", str(state_dir))
        assert down.returncode == 0, down.stdout + down.stderr
        # `down` returns only when everything is gone and the ports are free: `up` can follow at once
        assert _members(state_dir) == []
        assert all(port_free(int(port)) for port in ports[1::2])
    again = _eru("down", "--state-dir", str(state_dir))
    assert again.returncode == 0  # nothing running is not an error (docs/cli.md "Exit codes")
    assert "nothing running under" in again.stdout + again.stderr


def test_the_supervisor_gives_up_on_a_crash_loop_and_says_so(stack_dir: tuple[Path, list[str]]) -> None:
    """An eviction service that exits at start (code 3) every time: `eru up --detach` fails naming it (exit 1) and
    leaves the stack running for a look; after its crash loop the supervisor stops restarting it and says so,
    `eru status` reports it (exit 1), and the rest of the stack keeps running."""
    state_dir, ports = stack_dir
    broken = state_dir.parent / "broken"
    (broken / "eru_eviction").mkdir(parents=True)
    (broken / "eru_eviction" / "__init__.py").write_text("")
    (broken / "eru_eviction" / "__main__.py").write_text("raise SystemExit(3)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ERU_")}
    env["PYTHONPATH"] = str(broken)  # shadows the real eru_eviction for the services `eru up` starts
    args = [*ERU, "up", "--detach", "--state-dir", str(state_dir), "--sim-nodes", "0", *ports]
    started = subprocess.run(args, capture_output=True, text=True, env={**env, "COLUMNS": "250"}, timeout=150)
    assert started.returncode == 1, started.stdout + started.stderr
    assert "eviction is crash-looping: exited 3 times in a row before it was ready (last exit code 3)" in " ".join(
        started.stderr.split()
    )

    def gave_up() -> dict[str, str] | None:
        info = json.loads((state_dir / "stack.json").read_text())
        found: dict[str, str] = info["gave_up"]
        return found or None

    reasons = _wait_for(gave_up, 180, "the supervisor to give up on the crash-looping eviction service")
    assert set(reasons) == {"eviction"}
    assert "gave up after 6 crashes in a row" in reasons["eviction"]
    info = json.loads((state_dir / "stack.json").read_text())
    assert info["restarts"]["eviction"] == 5
    assert info["restarts"]["allocator"] == 0
    status = _eru("status", "--state-dir", str(state_dir))
    assert status.returncode == 1
    assert "supervisor gave up on eviction" in status.stdout
    log = (state_dir / "logs" / "supervisor.log").read_text()
    assert "eviction exited with code 3; gave up after 6 crashes in a row" in log
    assert _allocator(_status(state_dir)) is not None  # the rest keeps running
    down = _eru("down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stdout + down.stderr
    assert _members(state_dir) == []
