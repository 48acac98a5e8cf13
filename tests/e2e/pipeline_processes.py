"""The deploy pipeline as real processes (allocator replicas, distributor, sim node agent) for end-to-end tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from eru.testing.ledger_checks import usage_problems

__all__ = ["TERMINAL", "Processes", "usage_problems"]

TERMINAL = ("completed", "partial", "failed")


class Processes:
    """Service processes started with `python -m`, logs in `log_dir`, all stopped (SIGTERM, then SIGKILL) at the end."""

    def __init__(self, nats_url: str, dsn: str, log_dir: Path) -> None:
        self.env = {
            "ERU_BUS__URL": nats_url,
            "ERU_STORE__DSN": dsn,
            "ERU_LOG_FORMAT": "json",
            "ERU_LOG_LEVEL": "warning",
            "ERU_ALLOCATOR__ACK_WAIT_SECONDS": "3",
        }
        self.log_dir = log_dir
        self.running: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, module: str, **env: str) -> subprocess.Popen[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", module],
                env={**os.environ, **self.env, "ERU_REPLICA": name, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.running[name] = process
        return process

    def sim_agent(self, nodes: int, pod: str = "p1", cores: int = 8) -> None:
        self.start(
            "node-agent-sim",
            "eru_node_agent",
            ERU_NODE_AGENT__RUNTIME="sim",
            ERU_NODE_AGENT__NODE="sim",
            ERU_NODE_AGENT__POD=pod,
            ERU_NODE_AGENT__SIM_NODES=str(nodes),
            ERU_NODE_AGENT__CPU_CORES=str(cores),
            ERU_NODE_AGENT__MEMORY=str(32 * 1024**3),
            ERU_NODE_AGENT__HEARTBEAT_INTERVAL_SECONDS="2",
            ERU_NODE_AGENT__METRICS_INTERVAL_SECONDS="30",
        )

    def kill9(self, name: str) -> None:
        process = self.running.pop(name)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)

    def stop_all(self) -> None:
        for process in self.running.values():
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for process in self.running.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        self.running.clear()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.log_dir.glob("*.log")))
