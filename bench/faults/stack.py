"""The stack under test: `eru up --detach` on free ports, its processes, and how faults are injected into it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from eru.stack.info import StackInfo, pid_alive
from eru.testing.nats_server import NatsServer, free_port
from eru.testing.postgres_server import EmbeddedPostgres

UP_TIMEOUT_SECONDS = 120.0


def eru(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """`eru ARGS` in its own process (as an operator types it)."""
    return subprocess.run(
        [sys.executable, "-m", "eru.cli", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


class FaultStack:
    """One `eru up` stack in `state_dir` with `sim_nodes` simulated nodes."""

    def __init__(
        self, state_dir: Path, sim_nodes: int, *, inventory_seconds: float = 2.0, postgres_over: str = "socket"
    ) -> None:
        self.state_dir = state_dir
        self.sim_nodes = sim_nodes
        self.postgres_over = postgres_over  # how the services reach PostgreSQL: its Unix socket or loopback TCP
        self.nats_port = free_port()
        self.postgres_port = free_port()
        self.inventory_seconds = inventory_seconds
        self.info: StackInfo | None = None
        self.restarted: list[Any] = []  # servers this harness started again after killing them

    def up(self) -> float:
        """Start the stack and return the seconds it took; raises with the supervisor's log when it fails."""
        started = time.monotonic()
        env = {
            **os.environ,
            "ERU_INVENTORY_SECONDS": str(self.inventory_seconds),
            "ERU_RECONCILE__GRACE_SECONDS": "1",
            "ERU_ALLOCATOR__PENDING_TIMEOUT_SECONDS": "30",
        }
        args = ["up", "--detach", "--state-dir", str(self.state_dir), "--sim-nodes", str(self.sim_nodes)]
        args += ["--nats-port", str(self.nats_port), "--postgres-port", str(self.postgres_port)]
        usage = eru("up", "--help").stdout
        if "--console-port" in usage:  # the web console: any free port, never a shared default
            args += ["--console-port", "0"]
        if "--postgres-over" in usage:
            args += ["--postgres-over", self.postgres_over]
        done = subprocess.run(
            [sys.executable, "-m", "eru.cli", *args],
            capture_output=True,
            text=True,
            timeout=UP_TIMEOUT_SECONDS,
            env=env,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"eru up failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
        self.info = StackInfo.load(self.state_dir)
        if self.info is None:
            raise RuntimeError("eru up returned but wrote no stack.json")
        self._wait_nodes(started + UP_TIMEOUT_SECONDS)
        return time.monotonic() - started

    def _wait_nodes(self, deadline: float) -> None:
        """Until every simulated node has registered (before that a deploy finds no pod)."""
        import asyncio

        import asyncpg

        async def count() -> int:
            conn = await asyncpg.connect(self.dsn, timeout=5)
            try:
                return int(await conn.fetchval("SELECT count(*) FROM nodes WHERE state = 'up'"))
            finally:
                await conn.close()

        while time.monotonic() < deadline:
            try:
                if asyncio.run(count()) >= self.sim_nodes:
                    return
            except (OSError, asyncpg.PostgresError):
                pass
            time.sleep(0.3)
        raise RuntimeError(f"the {self.sim_nodes} simulated nodes did not register within {UP_TIMEOUT_SECONDS:g}s")

    def reload(self) -> StackInfo:
        """stack.json again (the supervisor rewrites pids when it restarts a process)."""
        info = StackInfo.load(self.state_dir)
        if info is not None:
            self.info = info
        assert self.info is not None
        return self.info

    @property
    def nats_url(self) -> str:
        """The operator's URL (credentials included) of the stack's NATS."""
        return self.reload().nats_url

    @property
    def admin_url(self) -> str:
        """The admin's URL (`auth/admin.url`, written by stacks with per-role users) for what only a service may
        publish (fuzzing every subject); the operator's URL when the stack writes none."""
        path = self.state_dir / "auth" / "admin.url"
        with contextlib.suppress(OSError):
            text = path.read_text().strip()
            if text:
                return text
        return self.nats_url

    @property
    def dsn(self) -> str:
        """The stack's PostgreSQL DSN."""
        return self.reload().database_dsn

    def pid_of(self, name: str) -> int | None:
        """The pid of a service process or server (`allocator`, `node-agent-sim`, `nats-server`, `postgres`)."""
        info = self.reload()
        if name == "supervisor":
            return info.supervisor_pid
        if name == "postgres":  # the postmaster itself (the recorded pid may be a wrapper that runs it as its user)
            with contextlib.suppress(OSError, ValueError, IndexError):
                pid = int((self.state_dir / "postgres" / "data" / "postmaster.pid").read_text().split()[0])
                if pid_alive(pid):
                    return pid
        return info.processes.get(name) or info.server_pids.get(name)

    @contextlib.contextmanager
    def supervisor_paused(self) -> Iterator[bool]:
        """The `eru up` supervisor stopped (SIGSTOP) for the block, then continued: nothing it supervises is
        restarted meanwhile, as under an init system that is slow to act. Yields whether a supervisor was paused.

        A fault that must last (PostgreSQL stopped for N s) needs it: the supervisor restarts a stopped server
        within a second, and a harness that then starts the server itself fights the supervisor over the data
        directory (each start terminates the other's postmaster), so the server flaps into the next scenario."""
        pid = self.pid_of("supervisor")
        if pid is None or not pid_alive(pid):
            yield False
            return
        os.kill(pid, signal.SIGSTOP)
        try:
            yield True
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def kill(self, name: str) -> int:
        """kill -9 of one process of the stack; returns its pid."""
        pid = self.pid_of(name)
        if pid is None or not pid_alive(pid):
            raise RuntimeError(f"{name} is not running")
        os.kill(pid, signal.SIGKILL)
        return pid

    def restart_server(self, name: str) -> None:
        """Start a killed nats-server or PostgreSQL again on the same port and data, as an init system would."""
        if name == "postgres":
            self._clear_zombie_lock()
            postgres = EmbeddedPostgres(self.state_dir / "postgres", port=self.postgres_port)
            deadline = time.monotonic() + 30
            while True:  # the killed postmaster's backends take a moment to notice and exit
                try:
                    postgres.start()
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(1.0)
            self.restarted.append(postgres)
            return
        auth = self.state_dir / "auth" / "nats.conf"
        server = NatsServer(
            store_dir=self.state_dir / "nats", port=self.nats_port, config_file=auth if auth.exists() else None
        )
        server.start()
        self.restarted.append(server)

    def _clear_zombie_lock(self) -> None:
        """A postmaster killed -9 stays a zombie until its parent (the supervisor) reaps it, and PostgreSQL refuses
        to start while the pid in its lock file exists; an init system would have reaped it: drop the stale lock."""
        import psutil

        base = self.state_dir / "postgres"
        for lock in [base / "data" / "postmaster.pid", *(base / "run").glob(".s.PGSQL.*.lock")]:
            with contextlib.suppress(OSError, ValueError, IndexError, psutil.Error):
                pid = int(lock.read_text().split()[0])
                if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                    lock.unlink()

    def stop_postgres(self) -> None:
        """Stop PostgreSQL (fast shutdown: clients see refused connections until it is started again)."""
        pid = self.pid_of("postgres")
        restarted = [s for s in self.restarted if isinstance(s, EmbeddedPostgres) and s.is_running()]
        if restarted:
            restarted[-1].stop()
            return
        if pid is None:
            raise RuntimeError("postgres is not running")
        os.kill(pid, signal.SIGINT)
        deadline = time.monotonic() + 30
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)

    def processes(self) -> dict[str, int]:
        """Every process the stack says it runs, with the servers and the supervisor."""
        info = self.reload()
        return {**info.processes, **info.server_pids, "supervisor": info.supervisor_pid}

    def alive(self) -> dict[str, bool]:
        """Which of them are alive (a server this harness started again counts for the one it replaced)."""
        alive = {name: pid_alive(pid) for name, pid in self.processes().items()}
        for server in self.restarted:
            name = "postgres" if isinstance(server, EmbeddedPostgres) else "nats-server"
            running = server.is_running() if isinstance(server, EmbeddedPostgres) else server.running
            alive[name] = alive.get(name, False) or bool(running)
        return alive

    def passwords(self) -> list[str]:
        """Every secret of the stack that must never appear in a log: the passwords in stack.json's URLs and in the
        bus and database URLs each running service was started with (read from /proc)."""
        from urllib.parse import urlsplit

        info = self.reload()
        urls = [info.nats_url, info.database_dsn]
        for pid in info.processes.values():
            with contextlib.suppress(OSError):
                for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    name, _, value = item.decode(errors="replace").partition("=")
                    if name in ("ERU_BUS__URL", "ERU_STORE__DSN"):
                        urls.append(value)
        found = set()
        for url in urls:
            with contextlib.suppress(ValueError):
                password = urlsplit(url).password
                if password:
                    found.add(password)
        return sorted(found)

    def secrets_in_logs(self) -> int:
        """How many log lines hold one of the stack's secrets."""
        secrets = [s for s in self.passwords() if len(s) >= 8]
        count = 0
        for log in (self.state_dir / "logs").glob("*.log"):
            with log.open(errors="replace") as handle:
                count += sum(1 for line in handle if any(secret in line for secret in secrets))
        return count

    def down(self) -> dict[str, Any]:
        """`eru down`, then whatever this harness restarted itself; what is left running is reported."""
        before = self.processes() if self.info else {}
        done = eru("down", "--state-dir", str(self.state_dir), timeout=120)
        for server in self.restarted:
            server.stop()
        self.restarted = []
        deadline = time.monotonic() + 30
        while any(pid_alive(pid) for pid in before.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = sorted(name for name, pid in before.items() if pid_alive(pid))
        return {"exit_code": done.returncode, "left_running": left, "output": (done.stdout + done.stderr).strip()}

    def force_cleanup(self) -> None:
        """Last resort at the end of the suite: kill what this stack left (only its own recorded pids)."""
        for server in self.restarted:
            server.stop()
        if self.info is None:
            return
        for pid in self.processes().values():
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
