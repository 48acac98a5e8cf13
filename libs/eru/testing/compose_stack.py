"""The compose stack as the failover test and bench/bench_failover.py drive it: the image (rebuilt only when the
sources changed), a stack of its own (project name, secrets directory and loopback ports unique to the test),
`docker kill`, and the checks that `make compose-down` leaves nothing of it behind (docs/deploy.md)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from eru.compose.topology import parse_env_file
from eru.stack.info import python_module

ROOT = Path(__file__).resolve().parents[3]  # the repository (compose files, scripts/)
IMAGE = os.environ.get("ERU_COMPOSE_IMAGE", "eru:latest")
BASE_IMAGE = os.environ.get("ERU_BASE_IMAGE", "eru-base:bookworm")
PROJECT_LABEL = "com.docker.compose.project"


def docker(*args: str, timeout: float = 60.0, check: bool = True) -> str:
    """Run the docker client; its stdout."""
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {done.stderr.strip()[-500:]}")
    return done.stdout


def source_hash() -> str:
    """The hash scripts/build-image.sh labels the image with (`io.eru.source`): every file the image installs."""
    paths: list[str] = []
    for top in ("pyproject.toml", "README.md", "libs", "services"):
        start = ROOT / top
        candidates = [start] if start.is_file() else [p for p in start.rglob("*") if p.is_file()]
        for path in candidates:
            relative = path.relative_to(ROOT).as_posix()
            if "/__pycache__/" in f"/{relative}" or ".egg-info" in relative:
                continue
            paths.append(relative)
    listing = "".join(f"{hashlib.sha256((ROOT / path).read_bytes()).hexdigest()}  {path}\n" for path in sorted(paths))
    return hashlib.sha256(listing.encode()).hexdigest()[:16]


class ImageUnavailable(RuntimeError):
    """The image cannot be built on this machine (no base image and no root for debootstrap)."""


def ensure_image() -> float:
    """Build the image when it is missing or older than the sources (seconds spent: 0 when reused); raises
    `ImageUnavailable` when it cannot be built here (no base image and no root for debootstrap)."""
    wanted = source_hash()
    label = docker("image", "inspect", "--format", '{{index .Config.Labels "io.eru.source"}}', IMAGE, check=False)
    if label.strip() == wanted:
        return 0.0
    base_present = subprocess.run(["docker", "image", "inspect", BASE_IMAGE], capture_output=True).returncode == 0
    if not base_present and os.geteuid() != 0:
        reason = f"NO {BASE_IMAGE} AND NOT ROOT (debootstrap): compose tests SKIPPED; run `make image` as root"
        raise ImageUnavailable(reason)
    started = time.monotonic()
    done = subprocess.run(
        ["bash", "scripts/build-image.sh"],
        cwd=ROOT,
        env={**os.environ, "ERU_IMAGE": IMAGE},
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return time.monotonic() - started


@dataclass
class ComposeStack:
    """One stack: `make compose-up`'s and `make compose-down`'s script with this project and secrets directory."""

    project: str
    directory: Path

    @classmethod
    def create(cls, root: Path) -> ComposeStack:
        """Secrets (free loopback ports) for a stack named uniquely."""
        stack = cls(project=f"erut{uuid.uuid4().hex[:8]}", directory=root / "compose")
        done = subprocess.run(
            python_module("eru.compose", "secrets", "--dir", str(stack.directory), "--free-ports"),
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return stack

    def _script(self, verb: str, timeout: float) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "ERU_COMPOSE_DIR": str(self.directory),
            "ERU_COMPOSE_PROJECT": self.project,
            "ERU_COMPOSE_IMAGE": IMAGE,
            "PY": sys.executable,
        }
        return subprocess.run(
            ["bash", "scripts/compose.sh", verb],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def up(self) -> None:
        """`make compose-up`: returns once every container is healthy and the client file is written."""
        done = self._script("up", timeout=400)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]

    def down(self) -> None:
        """`make compose-down`."""
        done = self._script("down", timeout=180)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]

    def client_env(self) -> dict[str, str]:
        """The variables of `<dir>/env`: ERU_BUS_URL, ERU_CLIENT_URL, ERU_DATABASE_URL."""
        return parse_env_file((self.directory / "env").read_text())

    def container(self, service: str) -> str:
        """The container name of `service` (docker-compose 1.x: `<project>_<service>_1`)."""
        return f"{self.project}_{service}_1"

    def kill(self, service: str) -> None:
        """`docker kill` (SIGKILL) of one service's container."""
        docker("kill", self.container(service))

    def exit_from_inside(self, service: str) -> int:
        """Make the container's process exit on its own (SIGTERM to its PID 1 from inside): to docker that is a
        crash, not a stop, so the restart policy applies. The restart count before it."""
        before = self.restart_count(service)
        docker("exec", self.container(service), "bash", "-c", "kill -TERM 1")
        return before

    def log_lines(self, services: list[str], words: tuple[str, ...], limit: int = 5) -> list[str]:
        """The first `limit` log lines of these services naming any of `words` (what a failed check shows)."""
        found: list[str] = []
        for service in services:
            done = subprocess.run(
                ["docker", "logs", self.container(service)], capture_output=True, text=True, timeout=60, check=False
            )
            found += [
                f"{service}: {line[:400]}"
                for line in (done.stdout + done.stderr).splitlines()
                if any(word in line for word in words)
            ]
        return found[:limit]

    def restart_count(self, service: str) -> int:
        """How many times docker restarted the container (its restart policy)."""
        return int(docker("inspect", "--format", "{{.RestartCount}}", self.container(service)).strip())

    def wait_restarted(self, service: str, before: int, within: float) -> bool:
        """Wait until docker has restarted the container since its count was `before`."""
        deadline = time.monotonic() + within
        while self.restart_count(service) <= before:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)
        return True

    def start(self, service: str) -> None:
        """Start a killed container again (what an operator or the host's init would do)."""
        docker("start", self.container(service))

    def health(self, service: str) -> str:
        """The health status docker reports for one container."""
        text = docker("inspect", "--format", "{{json .State}}", self.container(service))
        state = json.loads(text)
        return str((state.get("Health") or {}).get("Status") or state.get("Status"))

    def wait_healthy(self, services: list[str], within: float) -> dict[str, str]:
        """Wait until docker reports each service healthy; what is not, by service (empty when all are)."""
        deadline = time.monotonic() + within
        while True:
            states = {service: self.health(service) for service in services}
            waiting = {service: state for service, state in states.items() if state != "healthy"}
            if not waiting or time.monotonic() > deadline:
                return waiting
            time.sleep(1.0)

    def leftovers(self) -> dict[str, list[str]]:
        """Containers, networks and volumes still labelled with this project (all empty after compose-down)."""
        label = f"label={PROJECT_LABEL}={self.project}"
        return {
            "containers": docker("ps", "-a", "--filter", label, "--format", "{{.Names}}").split(),
            "networks": docker("network", "ls", "--filter", label, "--format", "{{.Name}}").split(),
            "volumes": docker("volume", "ls", "--filter", label, "--format", "{{.Name}}").split(),
        }

    def force_remove(self) -> None:
        """Remove whatever of the project is left (after a failed test), by its label only."""
        left = self.leftovers()
        if left["containers"]:
            docker("rm", "-f", "-v", *left["containers"], check=False)
        if left["networks"]:
            docker("network", "rm", *left["networks"], check=False)
        if left["volumes"]:
            docker("volume", "rm", "-f", *left["volumes"], check=False)
