"""`eru up` says it is up only when every process is ready, and says why not otherwise (docs/operations.md "Ready, or
why not"): real `eru` processes, real nats-server and PostgreSQL.

* run from a directory that holds a folder named `eru` (the parent of a clone named `eru`), the stack's processes
  import the installed eru, not that folder (`python -P`), and come up ready;
* a service that exits at start (a bad setting only it reads) makes `eru up --detach` and `eru up` fail (exit 1)
  naming it and its last error line; `eru logs` and `eru status` show that line; `eru down` still stops everything.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from eru.stack.stop import port_free
from eru.testing.nats_server import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# The console script, as an operator runs it (`eru/.venv/bin/eru up`): `python -m eru.cli` would itself import
# from the working directory.
ERU = str(Path(sys.executable).parent / "eru")
# A bad setting only the allocator reads (at start, after it connected): the others start as usual.
BAD_KEEP = '{"bogus": 1}'
BAD_KEEP_ERROR = "allocator.keep.bogus: unknown setting"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ERU_")}
    return {**env, "COLUMNS": "500", **extra}  # long error lines are not wrapped


def _eru(*args: str, cwd: Path | None = None, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ERU, *args], capture_output=True, text=True, env=_env(**extra), cwd=cwd, timeout=240, check=False
    )


def _flat(text: str) -> str:
    return " ".join(text.split())


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
    """A state directory outside pytest's private temp root (the PostgreSQL account traverses it), and free ports."""
    root = Path(tempfile.mkdtemp(prefix="eru-e2e-ready-"))
    state_dir = root / "state"
    ports = ["--nats-port", str(free_port()), "--postgres-port", str(free_port())]
    try:
        yield state_dir, ports
    finally:
        for process in _members(state_dir):
            process.kill()
        shutil.rmtree(root, ignore_errors=True)


def _services(state_dir: Path) -> tuple[int, dict[str, Any]]:
    result = _eru("status", "--state-dir", str(state_dir), "-o", "json")
    document: dict[str, Any] = json.loads(result.stdout)
    return result.returncode, document


def _outputs(state_dir: Path) -> str:
    """What the stack's processes printed outside their logs (`logs/*.out`), for a failure message."""
    return "\n".join(f"{path.name}: {path.read_text()}" for path in sorted((state_dir / "logs").glob("*.out")))


def _wait_for(predicate: Callable[[], bool], seconds: float, what: str, detail: Callable[[], str]) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}:\n{detail()}")


def _down(state_dir: Path, ports: list[str]) -> None:
    down = _eru("down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stdout + down.stderr
    assert _members(state_dir) == []
    assert all(port_free(int(port)) for port in ports[1::2])


def test_up_from_a_directory_holding_an_eru_folder_starts_every_service_ready(
    stack_dir: tuple[Path, list[str]],
) -> None:
    state_dir, ports = stack_dir
    caller = state_dir.parent / "work"
    (caller / "eru").mkdir(parents=True)
    (caller / "eru" / "__init__.py").write_text("")  # shadows the installed package for `python -m` in `caller`
    up = _eru(
        "up", "--detach", "--state-dir", str(state_dir), "--sim-nodes", "1", "--console-port", str(free_port()),
        *ports, cwd=caller,
    )  # fmt: skip
    assert up.returncode == 0, up.stdout + up.stderr
    assert "eru is up" in up.stdout
    ready = dict.fromkeys(("allocator", "distributor", "eviction", "node-agent"), "ready")

    def states() -> dict[str, str]:
        return {service["name"]: service["state"] for service in _services(state_dir)[1]["services"]}

    # every service answers ready (at once: `eru up` returned when they were; a shadowed one never would)
    _wait_for(lambda: states() == ready, 60, "every service to be ready", lambda: _outputs(state_dir))
    code, document = _services(state_dir)
    assert code == 0, document
    info = json.loads((state_dir / "stack.json").read_text())
    assert info["state"] == "up"
    assert info["crash_loops"] == {}
    assert all(count == 0 for count in info["restarts"].values()), info["restarts"]
    assert "ImportError" not in _outputs(state_dir)
    _down(state_dir, ports)


def test_a_service_crashing_at_start_fails_up_detach_naming_it_and_its_error(
    stack_dir: tuple[Path, list[str]],
) -> None:
    state_dir, ports = stack_dir
    args = ["up", "--detach", "--state-dir", str(state_dir), "--sim-nodes", "0", "--no-console", *ports]
    up = _eru(*args, ERU_ALLOCATOR__KEEP=BAD_KEEP)
    said = _flat(up.stderr)
    assert up.returncode == 1, up.stdout + up.stderr
    assert "eru is up" not in up.stdout
    assert "allocator is crash-looping" in said, said
    assert BAD_KEEP_ERROR in said, said
    assert "eru down" in said
    info = json.loads((state_dir / "stack.json").read_text())
    assert info["state"] == "failed"
    assert BAD_KEEP_ERROR in info["crash_loops"]["allocator"]["last_error"]

    # the crash output is in the allocator's .out file; `eru logs` shows it after the (empty) log
    logs = _eru("logs", "allocator", "--state-dir", str(state_dir))
    assert logs.returncode == 0, logs.stderr
    assert any(line.startswith("allocator.out | ") and BAD_KEEP_ERROR in line for line in logs.stdout.splitlines()), (
        logs.stdout
    )

    code, document = _services(state_dir)
    assert code == 1
    assert not document["healthy"]
    assert BAD_KEEP_ERROR in document["crash_looping"]["allocator"]["last_error"]
    text = _eru("status", "--state-dir", str(state_dir))
    assert text.returncode == 1
    assert "allocator is crash-looping" in _flat(text.stdout) or "supervisor gave up on allocator" in text.stdout
    assert BAD_KEEP_ERROR in _flat(text.stdout), text.stdout
    _down(state_dir, ports)


def test_a_service_crashing_at_start_fails_up_in_the_foreground_and_stops_the_stack(
    stack_dir: tuple[Path, list[str]],
) -> None:
    state_dir, ports = stack_dir
    args = ["up", "--state-dir", str(state_dir), "--sim-nodes", "0", "--no-console", *ports]
    up = _eru(*args, ERU_ALLOCATOR__KEEP=BAD_KEEP)
    said = _flat(up.stderr)
    assert up.returncode == 1, up.stdout + up.stderr
    assert "eru is up" not in up.stdout
    assert "allocator is crash-looping" in said, said
    assert BAD_KEEP_ERROR in said, said
    # it stopped what it started; the logs stay readable without a stack.json
    assert _members(state_dir) == []
    assert not (state_dir / "stack.json").exists()
    assert all(port_free(int(port)) for port in ports[1::2])
    logs = _eru("logs", "allocator", "--state-dir", str(state_dir))
    assert logs.returncode == 0, logs.stderr
    assert BAD_KEEP_ERROR in logs.stdout
