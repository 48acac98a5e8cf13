"""The CLI against a real `eru up --detach` stack, used as a person would: `eru status -o json` lists a /metrics URL
per replica and every one answers in the Prometheus text format, `--observability` writes a scrape config for the
same ports, `eru logs`, and Ctrl-C in a real terminal (tmux) on `eru events tail` and `eru logs -f` prints one line
and exits 130, no traceback. The state directory comes from ERU_STATE_DIR, as an operator would export it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from eru.testing.nats_server import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ERU = [sys.executable, "-m", "eru.cli"]


def _until(predicate: Callable[[], bool], seconds: float) -> bool:
    """Whether `predicate()` holds within `seconds` (asked every 0.2 s)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def _wait_for(predicate: Callable[[], bool], seconds: float, what: str) -> None:
    if not _until(predicate, seconds):
        raise AssertionError(f"timed out after {seconds} s waiting for {what}")


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[Path, dict[str, str]]]:
    """A detached embedded stack with 2 sim nodes; yields (observability dir, environment naming its state dir)."""
    root = Path(tempfile.mkdtemp(prefix="eru-cli-e2e-"))
    state_dir, observability = root / "state", root / "observability"
    env = {**os.environ, "ERU_STATE_DIR": str(state_dir), "COLUMNS": "200"}
    args = [*ERU, "up", "--detach", "--sim-nodes", "2", "--observability", str(observability)]
    args += ["--nats-port", str(free_port()), "--postgres-port", str(free_port()), "--console-port", str(free_port())]
    try:
        started = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
        assert started.returncode == 0, started.stdout + started.stderr
        yield observability, env
    finally:
        info_file = state_dir / "stack.json"
        pid = json.loads(info_file.read_text())["supervisor_pid"] if info_file.exists() else None
        subprocess.run([*ERU, "down"], env=env, capture_output=True, timeout=60)
        if pid is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(pid).wait(60)
        for process in psutil.process_iter(["cmdline"]):
            if str(state_dir) in " ".join(process.info["cmdline"] or []):
                process.kill()
        shutil.rmtree(root, ignore_errors=True)


def _status(env: dict[str, str]) -> dict[str, object]:
    result = subprocess.run([*ERU, "status", "-o", "json"], capture_output=True, text=True, env=env, timeout=60)
    document: dict[str, object] = json.loads(result.stdout)
    return document


def test_every_listed_metrics_port_serves_prometheus_text(stack: tuple[Path, dict[str, str]]) -> None:
    observability, env = stack
    _wait_for(lambda: bool(_status(env)["healthy"]), 90, "every replica ready in `eru status -o json`")
    document = _status(env)
    assert (document["schema"], document["schema_version"]) == ("eru.cli/status", 1)
    assert str(document["console_url"]).startswith("http://127.0.0.1:")  # the web console eru up serves
    services = document["services"]
    assert isinstance(services, list)
    assert {s["name"] for s in services} == {"allocator", "distributor", "eviction", "node-agent"}
    urls = [instance["metrics_url"] for s in services for instance in s["instances"]]
    assert len(urls) == 4
    assert len({url.rsplit(":", 1)[1] for url in urls}) == 4  # one port per replica
    for url in urls:
        with urllib.request.urlopen(url, timeout=10) as answer:  # loopback only
            body = answer.read().decode()
            assert answer.status == 200
            assert answer.headers["Content-Type"].startswith("text/plain")
        assert "# TYPE eru_messages_total counter" in body, url
        assert "# TYPE process_cpu_seconds_total counter" in body, url
    scrape = (observability / "prometheus.yml").read_text()
    for url in urls:
        assert url.split("//", 1)[1].removesuffix("/metrics") in scrape
    dashboard = json.loads((observability / "grafana-dashboard.json").read_text())
    assert all(panel["targets"][0]["expr"] for panel in dashboard["panels"])
    text = subprocess.run([*ERU, "status"], capture_output=True, text=True, env=env, timeout=60).stdout
    assert all(url in text for url in urls)

    # a stack reached by its bus URL alone (as one eru did not start): the services and their metrics, the database
    # "unknown" rather than down
    info = json.loads((Path(env["ERU_STATE_DIR"]) / "stack.json").read_text())
    remote = {**env, "ERU_STATE_DIR": str(observability / "no-stack-here"), "ERU_BUS_URL": info["nats_url"]}
    seen = _status(remote)
    assert seen["healthy"] is True
    assert seen["postgres"]["state"] == "unknown"  # type: ignore[index]
    assert sorted(i["metrics_url"] for s in seen["services"] for i in s["instances"]) == sorted(urls)  # type: ignore[attr-defined]


def test_deploy_prints_its_ids_and_explain_says_why_per_node(stack: tuple[Path, dict[str, str]]) -> None:
    _, env = stack
    _wait_for(lambda: bool(_status(env)["healthy"]), 90, "a ready stack")
    # sim nodes have 16 cores: 10 bound cores each leave room for one instance per node
    args = ["deploy", "--pod", "default", "--image", "busybox", "--cpu", "10", "--cpu-bind", "--memory", "64MiB"]
    shown = subprocess.run([*ERU, *args, "--count", "1"], capture_output=True, text=True, env=env, timeout=120)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    lines = {
        line.split(":", 1)[0]: line.split(":", 1)[1].split()[0] for line in shown.stdout.splitlines() if ":" in line
    }
    assert lines["deploy id"]
    decision = lines["decision id"]
    explained = subprocess.run([*ERU, "explain", decision, "-o", "json"], capture_output=True, text=True, env=env)
    assert explained.returncode == 0, explained.stderr
    view = json.loads(explained.stdout)
    assert (view["schema"], view["decision_id"], view["kind"], view["count"]) == (
        "eru.cli/explain",
        decision,
        "deploy",
        1,
    )
    [placed] = view["placed"]
    assert placed["instances"] == 1
    assert placed["numbers"]["limited_by"] == "cpu"
    [other] = view["not_chosen"]  # the other node had room too: the mode chose
    assert other["capacity"] == 1
    assert "placed them elsewhere" in other["why"]
    # now each node holds 10 of 16 cores: a second instance fits nowhere, and explain says why with the numbers
    refused = subprocess.run([*ERU, *args, "--count", "3"], capture_output=True, text=True, env=env, timeout=120)
    assert refused.returncode == 1
    decision = refused.stderr.split("eru explain ", 1)[1].split(")")[0].strip()
    text = subprocess.run([*ERU, "explain", decision], capture_output=True, text=True, env=env).stdout
    assert "too small: needs 10 cores, 6 free" in text, text
    assert "refused" in text


def test_logs_of_a_service_and_of_an_unknown_one(stack: tuple[Path, dict[str, str]]) -> None:
    _, env = stack
    _wait_for(lambda: bool(_status(env)["healthy"]), 90, "a ready stack")
    shown = subprocess.run([*ERU, "logs", "allocator", "-n", "3"], capture_output=True, text=True, env=env)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert 1 <= len(lines) <= 3
    assert all(json.loads(line)["service"] == "allocator" for line in lines)
    unknown = subprocess.run([*ERU, "logs", "scheduler"], capture_output=True, text=True, env=env)
    assert unknown.returncode == 2
    assert "no logs of 'scheduler'" in unknown.stderr
    assert "node-agent" in unknown.stderr


class Terminal:
    """A tmux session on its own server socket: type a line, press keys, read the screen."""

    def __init__(self, env: dict[str, str]) -> None:
        self.socket = f"eru-test-{os.getpid()}-{time.monotonic_ns()}"
        bin_dir = Path(sys.executable).parent  # where the `eru` console script is installed
        exports = f"export ERU_STATE_DIR={env['ERU_STATE_DIR']} PATH={bin_dir}:$PATH PS1='$ '"
        self._tmux("new-session", "-d", "-s", "t", "-x", "200", "-y", "50", "bash --norc --noprofile")
        self.type(exports)

    def _tmux(self, *args: str) -> str:
        result = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True)
        return result.stdout

    def type(self, line: str) -> None:
        self._tmux("send-keys", "-t", "t", line, "Enter")

    def press(self, key: str) -> None:
        self._tmux("send-keys", "-t", "t", key)

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "t", "-S", "-200")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, check=False)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (scripts/install-system-packages.sh)")
@pytest.mark.parametrize(
    ("verb", "ready"),
    [("events tail", "eru.deploy."), ("logs allocator -f -n 1", '"service": "allocator"')],
    ids=["events-tail", "logs-follow"],
)
def test_ctrl_c_in_a_terminal_exits_130_with_one_line(
    stack: tuple[Path, dict[str, str]], verb: str, ready: str
) -> None:
    _, env = stack
    _wait_for(lambda: bool(_status(env)["healthy"]), 90, "a ready stack")
    terminal = Terminal(env)
    try:
        terminal.type(f"eru {verb}; echo EXIT=$?")
        if verb == "events tail":
            # An idle stack stores almost nothing (an idle node's unchanged condition goes every 300 s,
            # docs/colocation.md "Conditions"): deploys make the events to follow, one at a time until the tail,
            # which follows from the moment it has subscribed, shows one.
            small = ["deploy", "--pod", "default", "--image", "busybox", "--count", "1", "--cpu", "0.1"]

            def a_deploy_shown() -> bool:
                placed = subprocess.run([*ERU, *small, "--memory", "16MiB"], capture_output=True, text=True, env=env)
                assert placed.returncode == 0, placed.stdout + placed.stderr
                return _until(lambda: ready in terminal.screen(), 5.0)

            _wait_for(a_deploy_shown, 90, "`eru events tail` to show a deploy's events")
        # the allocator logs all the time: wait until the verb shows output
        _wait_for(lambda: ready in terminal.screen(), 60, f"`eru {verb}` to print something")
        terminal.press("C-c")
        _wait_for(lambda: re.search(r"EXIT=\d", terminal.screen()) is not None, 30, "the verb to exit after Ctrl-C")
        screen = terminal.screen()
    finally:
        terminal.close()
    after = screen.split(f"$ eru {verb}; echo EXIT=$?", 1)[1]
    assert "EXIT=130" in after, screen
    assert "Traceback" not in after, screen
    assert after.count("eru: interrupted") == 1, screen
    assert "Error" not in after.split("eru: interrupted", 1)[1], screen


def test_down_stops_it(stack: tuple[Path, dict[str, str]]) -> None:
    """Last in the module: `eru down` (with ERU_STATE_DIR) stops the supervisor."""
    _, env = stack
    info = json.loads((Path(env["ERU_STATE_DIR"]) / "stack.json").read_text())
    result = subprocess.run([*ERU, "down"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    # `eru down` returns only once the supervisor (and everything else) is gone (docs/operations.md)
    assert not psutil.pid_exists(info["supervisor_pid"]) or psutil.Process(info["supervisor_pid"]).status() == "zombie"
