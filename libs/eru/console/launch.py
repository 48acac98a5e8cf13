"""Where a running console is and how to log in to it (`<state_dir>/console.json`), and starting one as a process
for `eru up`. Light on imports: `eru console url` needs neither aiohttp nor nats."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from eru.console.auth import TOKEN_TTL_SECONDS, mint_token
from eru.errors import EruError

CONSOLE_FILE = "console.json"


class ConsoleUnavailable(EruError):
    """No console runs from this state directory, or it did not start."""

    code = "console_unavailable"


@dataclass(frozen=True)
class ConsoleInfo:
    """What a running console writes for `eru console url` (owner-only: the secret signs login tokens)."""

    url: str
    secret: str
    pid: int
    bus: str

    def save(self, state_dir: Path) -> None:
        """Write `console.json` atomically, readable by the owner only."""
        state_dir.mkdir(parents=True, exist_ok=True)
        path = state_dir / CONSOLE_FILE
        tmp = path.with_suffix(".tmp")
        descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(json.dumps(asdict(self), indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls, state_dir: Path) -> ConsoleInfo | None:
        """The console of `state_dir`, or None when none wrote its file there."""
        path = state_dir / CONSOLE_FILE
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            raise ConsoleUnavailable(f"{path}: cannot read it ({error})") from None
        return cls(url=str(raw["url"]), secret=str(raw["secret"]), pid=int(raw["pid"]), bus=str(raw.get("bus", "")))

    def login_url(self, now: float, ttl: float = TOKEN_TTL_SECONDS) -> str:
        """A one-time login URL: the console's address with a fresh token."""
        return f"{self.url.rstrip('/')}/login?token={mint_token(self.secret, now, ttl=ttl)}"


def remove_info(state_dir: Path, pid: int) -> None:
    """Delete `console.json` if it is this process's (a newer console's file is left alone)."""
    info = None
    try:
        info = ConsoleInfo.load(state_dir)
    except ConsoleUnavailable:
        return
    if info is not None and info.pid == pid:
        (state_dir / CONSOLE_FILE).unlink(missing_ok=True)


def running_console(state_dir: Path) -> ConsoleInfo:
    """The live console of `state_dir`; `ConsoleUnavailable` with what to do when there is none."""
    from eru.stack.info import pid_alive

    info = ConsoleInfo.load(state_dir)
    if info is None or not pid_alive(info.pid):
        raise ConsoleUnavailable(
            f"no console is running from {state_dir} (start one with `eru up` or `eru console --bus-url …`)"
        )
    return info


def start_console_process(
    state_dir: Path,
    bus_url: str,
    port: int,
    log_path: Path,
    host: str = "127.0.0.1",
    extra_env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start `eru console` for a stack (the bus URL travels in the environment, never on the command line)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    from eru.stack.info import open_private_log, python_module

    # -P: never an `eru` package from the caller's working directory (eru.stack.info.python_module)
    args = python_module("eru.cli", "console", "--host", host, "--port", str(port))
    args += ["--state-dir", str(state_dir), "--no-print-url"]
    env = {**os.environ, "ERU_BUS_URL": bus_url, "ERU_BUS__URL": bus_url, "ERU_LOG_FORMAT": "json", **(extra_env or {})}

    with open_private_log(log_path) as log_file:  # 0600: the stack's logs are its owner's (docs/security.md)
        return subprocess.Popen(args, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)


def wait_for_console(state_dir: Path, process: subprocess.Popen[bytes], timeout: float = 30.0) -> ConsoleInfo:
    """The info the console process writes once it listens; `ConsoleUnavailable` if it exits or takes too long."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = ConsoleInfo.load(state_dir)
        if info is not None and info.pid == process.pid:
            return info
        if process.poll() is not None:
            raise ConsoleUnavailable(f"the console exited with code {process.returncode} before listening")
        time.sleep(0.05)
    raise ConsoleUnavailable(f"the console did not listen within {timeout:.0f} s")
