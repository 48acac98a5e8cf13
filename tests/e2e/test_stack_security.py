"""`eru up` as a tenant's client and as an attacker would use it: tenant credentials, a client denied operator verbs
and other tenants' containers, and no secret in any log file, in `eru status` or readable by anybody else.

These run the installed `eru` console script exactly as a user would (docs/security.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import asyncpg
import psutil
import pytest

from eru.testing.nats_server import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ERU = [sys.executable, "-m", "eru.cli"]


def _wait_for(predicate: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


@pytest.fixture
def running_stack() -> Iterator[Path]:
    """A stack with one simulated node, every service up (`eru status` exit 0)."""
    root = Path(tempfile.mkdtemp(prefix="eru-e2e-sec-"))
    state_dir = root / "state"
    args = [*ERU, "up", "--state-dir", str(state_dir), "--sim-nodes", "1"]
    args += ["--nats-port", str(free_port()), "--postgres-port", str(free_port()), "--console-port", str(free_port())]
    supervisor = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: (state_dir / "stack.json").exists() or supervisor.poll() is not None, 90, "stack.json")
        assert supervisor.poll() is None

        def all_up() -> bool:
            return _eru("status", "--state-dir", str(state_dir)).returncode == 0

        _wait_for(all_up, 90, "every service to be ready")
        yield state_dir
    finally:
        if supervisor.poll() is None:
            supervisor.send_signal(signal.SIGINT)
            try:
                supervisor.wait(60)
            except subprocess.TimeoutExpired:
                supervisor.kill()
        shutil.rmtree(root, ignore_errors=True)


def _eru(*args: str, credentials: Path | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ERU_")}
    env["COLUMNS"] = "250"
    if credentials is not None:
        env["ERU_CREDENTIALS"] = str(credentials)
    return subprocess.run([*ERU, *args], capture_output=True, text=True, env=env, timeout=120, cwd=cwd)


def _one_line_denial(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


async def _containers(dsn: str) -> list[tuple[str, str, str]]:
    connection = await asyncpg.connect(dsn, timeout=10)
    try:
        rows = await connection.fetch("SELECT id, tenant, state FROM containers ORDER BY created_at")
        return [(row["id"], row["tenant"], row["state"]) for row in rows]
    finally:
        await connection.close()


def _secrets(state_dir: Path, info: dict[str, Any], extra: list[str]) -> list[str]:
    """Every password of the stack: the operator's, each process's (from its environment), PostgreSQL's, tenants'."""
    found = [unquote(urlsplit(info["nats_url"]).password or ""), *extra]
    found.append((state_dir / "auth" / "postgres.password").read_text().strip())
    found += json.loads((state_dir / "auth" / "tenants.json").read_text()).values()
    for pid in info["processes"].values():
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        for entry in environ:
            name, _, value = entry.decode(errors="replace").partition("=")
            if name in ("ERU_BUS__URL", "ERU_STORE__DSN"):
                found.append(unquote(urlsplit(value).password or ""))
    return sorted({secret for secret in found if secret})


def test_tenant_client_is_confined_and_no_secret_leaks(running_stack: Path) -> None:
    state_dir = running_stack
    info = json.loads((state_dir / "stack.json").read_text())
    creds = state_dir.parent / "team-a.creds"
    created = _eru("tenant", "create", "team-a", "--credentials", "--out", str(creds), "--state-dir", str(state_dir))
    assert created.returncode == 0, created.stdout + created.stderr
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600
    url = creds.read_text().strip()
    assert urlsplit(url).username == "tenant-team-a"
    shown = _eru("tenant", "credentials", "team-a", "--state-dir", str(state_dir))
    assert shown.stdout.strip() == url

    # the operator deploys for tenant default, the client for its own tenant (whatever its --tenant says)
    operator_deploy = _eru(
        "deploy", "--pod", "default", "--image", "busybox", "--cpu", "0.1", "--memory", "16MiB",
        "--state-dir", str(state_dir),
    )  # fmt: skip
    assert operator_deploy.returncode == 0, operator_deploy.stdout + operator_deploy.stderr
    client_deploy = _eru(
        "deploy", "--pod", "default", "--image", "busybox", "--cpu", "0.1", "--memory", "16MiB", "--tenant", "team-a",
        credentials=creds,
    )  # fmt: skip
    assert client_deploy.returncode == 0, client_deploy.stdout + client_deploy.stderr
    dsn = info["database_dsn"]
    rows = asyncio.run(_containers(dsn))
    assert [(tenant, state) for _, tenant, state in rows] == [("default", "running"), ("team-a", "running")]
    theirs, mine = rows[0][0], rows[1][0]

    # a body naming another tenant is refused: the tenant comes from the credentials
    forged = _eru(
        "deploy", "--pod", "default", "--image", "busybox", "--cpu", "0.1", "--tenant", "default", "--no-wait",
        credentials=creds,
    )  # fmt: skip
    assert forged.returncode == 0  # `default` is the unnamed tenant: the client's own is used
    denied_tenant = _eru(
        "deploy", "--pod", "default", "--image", "busybox", "--cpu", "0.1", "--tenant", "other", "--no-wait",
        credentials=creds,
    )  # fmt: skip
    assert "workload.tenant" in _one_line_denial(denied_tenant)

    # operator verbs: one line each, no traceback
    for verb in (["node", "cordon", "sim"], ["tenant", "ls"], ["node", "ls"], ["pod", "create", "p9"]):
        line = _one_line_denial(_eru(*verb, credentials=creds))
        assert "permission denied" in line.lower(), (verb, line)
    # another tenant's container: refused, nothing changes
    line = _one_line_denial(_eru("container", "rm", theirs, credentials=creds))
    assert "not a container of tenant 'team-a'" in line
    listed = _eru("container", "ls", credentials=creds)
    assert mine in listed.stdout
    assert theirs not in listed.stdout
    after = asyncio.run(_containers(dsn))
    assert (theirs, "default", "running") in after
    # logs and exec (docs/security.md "Logs and exec"): its own container streams to it under its permissions,
    # another tenant's is refused in one line
    own = _eru("exec", mine, "--", "echo", "hi", credentials=creds)
    assert (own.returncode, own.stdout) == (0, "echo hi\n"), own.stderr
    line = _one_line_denial(_eru("container", "logs", theirs, credentials=creds))
    assert f"container_id: '{theirs}' is not a container of tenant 'team-a'" in line
    line = _one_line_denial(_eru("exec", theirs, "--", "echo", "hi", credentials=creds))
    assert "is not a container of tenant 'team-a'" in line

    # secrets: no password in any log file, in `eru status`, or without a password into PostgreSQL
    secrets = _secrets(state_dir, info, [unquote(urlsplit(url).password or "")])
    assert len(secrets) >= 7  # operator, allocator, distributor, eviction, node agent, PostgreSQL, tenants
    status = _eru("status", "--state-dir", str(state_dir))
    logs = [path for path in state_dir.rglob("*") if path.is_file() and path.suffix == ".log"]
    assert len(logs) >= 5
    for text in [status.stdout + status.stderr, *(path.read_text(errors="replace") for path in logs)]:
        assert not [secret for secret in secrets if secret in text]
    config = (state_dir / "auth" / "nats.conf").read_text()
    assert not [secret for secret in secrets if secret in config]
    assert '"$2a$' in config
    port = urlsplit(dsn).port
    with pytest.raises(asyncpg.InvalidPasswordError):
        asyncio.run(asyncpg.connect(f"postgresql://postgres@127.0.0.1:{port}/eru", timeout=10))

    # modes: the state directory is the owner's (0700; under root 0711, search only, so that the PostgreSQL account
    # reaches its data directory), every credential and log file 0600
    assert stat.S_IMODE(state_dir.stat().st_mode) == (0o711 if os.geteuid() == 0 else 0o700)
    assert stat.S_IMODE((state_dir / "auth").stat().st_mode) == 0o700
    for path in [state_dir / "stack.json", *(state_dir / "auth").iterdir(), *(state_dir / "logs").iterdir()]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert psutil.pid_exists(info["supervisor_pid"])
