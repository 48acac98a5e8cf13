"""`eru up` end to end: the real embedded stack as subprocesses, `eru status`, a clean stop, bad input.

These run the installed `eru` console script exactly as a user would.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import psutil
import pytest

from eru.testing.nats_server import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ERU = [sys.executable, "-m", "eru.cli"]


def _wait_for(predicate: object, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


BACKENDS_SQL = """
SELECT count(*) FILTER (WHERE client_addr IS NULL) AS over_socket,
       count(*) FILTER (WHERE client_addr IS NOT NULL) AS over_tcp
FROM pg_stat_activity
WHERE datname = 'eru' AND backend_type = 'client backend' AND pid <> pg_backend_pid()
"""


async def _backends(dsn: str) -> tuple[int, int]:
    """Client connections to the `eru` database other than this one: (over the Unix socket, over TCP)."""
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow(BACKENDS_SQL)
    finally:
        await conn.close()
    assert row is not None
    return int(row["over_socket"]), int(row["over_tcp"])


def _processes_under(state_dir: Path) -> list[psutil.Process]:
    """Every live process whose command line mentions the state directory (servers, services, supervisor)."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if str(state_dir) in cmdline and process.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(process)
    return found


@pytest.fixture
def stack_dir() -> Iterator[Path]:
    """A state directory outside pytest's private (0700) temp root, which the PostgreSQL account must traverse;
    pytest resets that root's mode whenever another session starts, so it is no place for a server's data."""
    path = Path(tempfile.mkdtemp(prefix="eru-e2e-"))
    try:
        yield path / "state"
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def stack(stack_dir: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    state_dir = stack_dir
    args = [*ERU, "up", "--state-dir", str(state_dir), "--sim-nodes", "0"]
    args += ["--nats-port", str(free_port()), "--postgres-port", str(free_port()), "--console-port", str(free_port())]
    supervisor = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        yield supervisor, state_dir
    finally:
        if supervisor.poll() is None:
            supervisor.send_signal(signal.SIGINT)
            try:
                supervisor.wait(60)
            except subprocess.TimeoutExpired:
                supervisor.kill()
        for process in _processes_under(state_dir):
            process.kill()


def test_up_status_and_ctrl_c_leave_no_process_behind(stack: tuple[subprocess.Popen[bytes], Path]) -> None:
    supervisor, state_dir = stack
    stack_file = state_dir / "stack.json"
    _wait_for(lambda: stack_file.exists() or supervisor.poll() is not None, 90, "stack.json")
    assert supervisor.poll() is None, supervisor.stdout.read().decode() if supervisor.stdout else ""
    info = json.loads(stack_file.read_text())
    pids = [*info["processes"].values(), *info["server_pids"].values()]
    assert set(info["processes"]) == {"allocator", "distributor", "eviction", "console"}
    assert set(info["server_pids"]) == {"nats-server", "postgres"}
    assert all(psutil.pid_exists(pid) for pid in pids)
    # access control is on: credentials and server configuration are readable by the owner only
    assert stack_file.stat().st_mode & 0o777 == 0o600
    assert (state_dir / "auth" / "nats.conf").stat().st_mode & 0o777 == 0o600
    anonymous = info["nats_url"].split("@", 1)[1]
    refused = subprocess.run(
        [*ERU, "status", "--nats", f"nats://{anonymous}", "--database", info["database_dsn"], "--timeout", "10"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "300"},  # the reason must not be wrapped mid-word by the table
    )
    assert refused.returncode == 1
    assert "authorization" in refused.stdout.lower(), refused.stdout

    def services_ready() -> bool:
        result = subprocess.run([*ERU, "status", "--state-dir", str(state_dir)], capture_output=True, text=True)
        return all(f"{name}-1" in result.stdout for name in ("allocator", "distributor", "eviction"))

    _wait_for(services_ready, 60, "every service replica to answer `eru status`")
    # the services reach the embedded PostgreSQL over its Unix socket (docs/operations.md), no service over TCP
    socket_backends, tcp_backends = asyncio.run(_backends(info["database_dsn"]))
    assert socket_backends >= 1
    assert tcp_backends == 0
    result = subprocess.run([*ERU, "status", "--state-dir", str(state_dir)], capture_output=True, text=True)
    assert "nats" in result.stdout
    assert "postgres" in result.stdout
    # no node agent was asked for (--sim-nodes 0): status names it missing and exits 1
    assert "node-agent" in result.stdout
    assert "missing" in result.stdout
    assert result.returncode == 1

    supervisor.send_signal(signal.SIGINT)
    assert supervisor.wait(60) == 130  # Ctrl-C: a clean stop, and the exit code of an interrupt (docs/cli.md)
    output = supervisor.stdout.read().decode() if supervisor.stdout else ""
    assert "no process left behind" in output
    assert "web console: http://127.0.0.1:" in output
    assert "/login?token=" in output
    assert not (state_dir / "console.json").exists()
    assert output.count("eru: interrupted") == 1
    assert "Traceback" not in output
    assert not [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    assert _processes_under(state_dir) == []
    assert not stack_file.exists()


def test_state_survives_a_restart(stack_dir: Path) -> None:
    """Data written into the embedded PostgreSQL is there after the stack is stopped and started again."""
    state_dir = stack_dir
    ports = ["--nats-port", str(free_port()), "--postgres-port", str(free_port())]
    base = [*ERU, "up", "--state-dir", str(state_dir), "--sim-nodes", "0", "--no-console", *ports]
    for round_number in range(2):
        supervisor = subprocess.Popen(base, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _wait_for(lambda: (state_dir / "stack.json").exists(), 90, "stack.json")
            dsn = json.loads((state_dir / "stack.json").read_text())["database_dsn"]
            script = (
                "import asyncio, asyncpg, sys\n"
                "async def main():\n"
                "    conn = await asyncpg.connect(sys.argv[1])\n"
                "    if sys.argv[2] == '0':\n"
                "        await conn.execute(\"INSERT INTO pods (name) VALUES ('kept')\")\n"
                "    print(await conn.fetchval(\"SELECT count(*) FROM pods WHERE name = 'kept'\"))\n"
                "    await conn.close()\n"
                "asyncio.run(main())\n"
            )
            result = subprocess.run(
                [sys.executable, "-c", script, dsn, str(round_number)], capture_output=True, text=True, check=True
            )
            assert result.stdout.strip() == "1"
        finally:
            supervisor.send_signal(signal.SIGINT)
            supervisor.wait(60)


def test_port_in_use_is_one_clear_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [*ERU, "up", "--state-dir", str(tmp_path / "s"), "--nats-port", str(port), "--no-console"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COLUMNS": "200"},
        )
    assert result.returncode == 2
    assert f"port {port}" in result.stderr
    assert "already in use" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_status_without_stack_and_unreachable_server(tmp_path: Path) -> None:
    result = subprocess.run([*ERU, "status", "--state-dir", str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 2
    assert "no stack under" in result.stderr
    dead = f"nats://127.0.0.1:{free_port()}"
    dsn = f"postgresql://postgres@127.0.0.1:{free_port()}/eru"
    result = subprocess.run(
        [*ERU, "status", "--nats", dead, "--database", dsn, "--timeout", "0.5"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 1
    assert "down" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
