"""`eru console --bus-url …` alone against a stack it did not start (a real pipeline: NATS, PostgreSQL, allocator,
distributor, scripted agent), and its command-line errors (docs/console.md)."""

from __future__ import annotations

import asyncio
import http.cookiejar
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from pipeline_harness import pipeline_with_scripted_agent

from eru.testing.nats_server import free_port

pytestmark = pytest.mark.timeout(120)
ERU = [sys.executable, "-m", "eru.cli"]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ERU, *args], capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})})


async def _wait_file(path: Path, process: subprocess.Popen[bytes]) -> dict[str, Any]:
    async with asyncio.timeout(30):
        while not await asyncio.to_thread(path.exists):
            assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
            await asyncio.sleep(0.05)
    return dict(json.loads(await asyncio.to_thread(path.read_text)))


def _get(opener: Any, url: str) -> tuple[int, Any]:
    try:
        with opener.open(url, timeout=20) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), json.loads(error.read())


async def test_a_console_alone_serves_a_stack_it_did_not_start(
    nats_url: str, postgres_dsn: str, tmp_path: Path
) -> None:
    async with pipeline_with_scripted_agent(nats_url, postgres_dsn, nodes=("n1", "n2")) as (pipe, _agent):
        deploy_id = await pipe.deploy(count=1, workload={"name": "web", "image": "busybox"})
        assert (await pipe.terminal(deploy_id)).kind == "completed"
        state_dir = tmp_path / "console-state"
        process = await asyncio.to_thread(
            subprocess.Popen,
            [*ERU, "console", "--port", "0", "--state-dir", str(state_dir)],
            env={**os.environ, "ERU_BUS_URL": nats_url},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            info = await _wait_file(state_dir / "console.json", process)
            assert (state_dir / "console.json").stat().st_mode & 0o777 == 0o600  # it holds the signing secret
            login = await asyncio.to_thread(_run, "console", "url", "--state-dir", str(state_dir))
            assert login.returncode == 0, login.stderr
            assert login.stdout.startswith(info["url"].rstrip("/") + "/login?token=")
            opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
            await asyncio.to_thread(opener.open, login.stdout.strip(), None, 20)
            status, nodes = await asyncio.to_thread(_get, opener, info["url"] + "api/nodes")
            assert status == 200
            assert [card["name"] for card in nodes["cards"]] == ["n1", "n2"]
            status, deploys = await asyncio.to_thread(_get, opener, info["url"] + "api/deploys")
            assert [d["id"] for d in deploys["deploys"]] == [deploy_id]
        finally:
            process.send_signal(signal.SIGTERM)
            output = (await asyncio.to_thread(process.communicate, None, 30))[0].decode()
        assert process.returncode == 0, output
        assert "log in (once, within 10 minutes): http://127.0.0.1:" in output
        assert "Traceback" not in output
        assert not (state_dir / "console.json").exists()  # a stopped console leaves no login behind


def test_console_command_line_errors_are_one_line(tmp_path: Path) -> None:
    no_console = _run("console", "url", "--state-dir", str(tmp_path))
    assert no_console.returncode == 3  # unavailable: no console runs there (docs/cli.md "Exit codes")
    assert f"no console is running from {tmp_path}" in no_console.stderr
    env = {"ERU_BUS_URL": "", "ERU_BUS__URL": ""}
    no_stack = _run("console", "--state-dir", str(tmp_path), env=env)
    assert no_stack.returncode == 2
    assert "pass --bus-url" in no_stack.stderr
    dead = _run("console", "--bus-url", f"nats://127.0.0.1:{free_port()}", "--port", "0", "--state-dir", str(tmp_path))
    assert dead.returncode == 3
    assert "cannot reach NATS" in dead.stderr
    for result in (no_console, no_stack, dead):
        assert "Traceback" not in result.stdout + result.stderr
