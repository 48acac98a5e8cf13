"""A `eru up --nats-cluster 3` stack for the cluster tests, and the INFO check: what each server tells clients."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from eru.embedded.nats_server import free_port, server_info
from eru.stack.info import StackInfo, pid_alive, python_module


def eru(*args: str, timeout: float = 60.0, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`eru ARGS` in its own process, as an operator types it."""
    return subprocess.run(
        python_module("eru.cli", *args),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


def free_ports_in_a_row(count: int) -> int:
    """A first port such that it and the `count - 1` after it are free now (a cluster's client ports)."""
    for _ in range(200):
        first = free_port()
        if first + count < 65536 and all(_bindable(first + offset) for offset in range(count)):
            return first
    raise RuntimeError(f"no {count} free loopback ports in a row")


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def raw_info(port: int) -> dict[str, Any]:
    """The INFO line a raw TCP client reads from the server on loopback `port` (no credentials needed)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        info = server_info("127.0.0.1", port, timeout=1.0)
        if info is not None:
            return dict(info)
        time.sleep(0.1)
    raise AssertionError(f"no INFO from 127.0.0.1:{port}")


class ClusterStack:
    """`eru up --detach --nats-cluster 3` under `state_dir` on free ports, with `sim_nodes` simulated nodes."""

    def __init__(self, state_dir: Path, sim_nodes: int, extra_args: tuple[str, ...] = ()) -> None:
        self.state_dir = state_dir
        self.sim_nodes = sim_nodes
        self.extra_args = extra_args  # more `eru up` options (sim node sizes, replicas)
        self.nats_port = free_ports_in_a_row(3)
        self.postgres_port = free_port()
        self.pids: dict[str, int] = {}

    def up(self) -> None:
        """Start it; returns once every simulated node is up in the ledger."""
        args = ["up", "--detach", "--state-dir", str(self.state_dir), "--nats-cluster", "3", "--no-console"]
        args += ["--nats-port", str(self.nats_port), "--postgres-port", str(self.postgres_port)]
        args += ["--sim-nodes", str(self.sim_nodes), *self.extra_args]
        done = eru(*args, timeout=150, env={"ERU_RECONCILE__GRACE_SECONDS": "1"})
        assert done.returncode == 0, done.stdout + done.stderr
        info = self.info()
        self.pids = {**info.processes, **info.server_pids, "supervisor": info.supervisor_pid}
        self.wait(lambda: self.nodes_up() >= self.sim_nodes, 90, "the simulated nodes to register")

    def info(self) -> StackInfo:
        """stack.json now."""
        info = StackInfo.load(self.state_dir)
        assert info is not None, "no stack.json"
        return info

    def nodes_up(self) -> int:
        """Nodes `up` in the ledger."""
        import asyncio

        import asyncpg

        async def count() -> int:
            conn = await asyncpg.connect(self.info().database_dsn, timeout=5)
            try:
                return int(await conn.fetchval("SELECT count(*) FROM nodes WHERE state = 'up'"))
            finally:
                await conn.close()

        with contextlib.suppress(OSError, asyncpg.PostgresError):
            return asyncio.run(count())
        return 0

    def status(self) -> dict[str, Any]:
        """`eru status -o json` (its exit code says healthy or not; the document says why)."""
        done = eru("status", "--state-dir", str(self.state_dir), "-o", "json", timeout=60)
        assert done.stdout.strip(), done.stderr
        document: dict[str, Any] = json.loads(done.stdout)
        return document

    @staticmethod
    def wait(condition: Any, within: float, what: str) -> None:
        """Until `condition()` holds; fails naming `what` after `within` seconds."""
        deadline = time.monotonic() + within
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {within:g} s waiting for {what}")
            time.sleep(0.3)

    def down(self) -> subprocess.CompletedProcess[str]:
        """`eru down`."""
        return eru("down", "--state-dir", str(self.state_dir), timeout=120)

    def force_cleanup(self) -> None:
        """After a failed test: kill what this stack started (its own recorded pids only)."""
        with contextlib.suppress(Exception):
            self.down()
        for pid in self.pids.values():
            if pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
