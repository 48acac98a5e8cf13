"""`eru dlq redrive --all` of many dead letters in a real terminal (tmux): a rich progress bar while it runs, then one
line with the count (docs/operations.md "Dead letters")."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import nats
import pytest

from eru.bus.streams import DLQ, provision_streams
from eru.testing.nats_server import NatsServer

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
LETTERS = 1500


@pytest.fixture
def server_with_dead_letters() -> Iterator[str]:
    server = NatsServer()
    server.start()

    async def fill() -> None:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await provision_streams(js)
        for index in range(LETTERS):
            headers = {"Eru-Dlq-Reason": "test", "Eru-Dlq-Subject": "eru.deploy.request", "ce-id": f"m{index}"}
            await js.publish_async("eru.dlq.eru.deploy.request", b"{}", headers=headers)
        await js.publish_async_completed()
        assert (await js.stream_info(DLQ)).state.messages == LETTERS
        await nc.close()

    try:
        asyncio.run(fill())
        yield server.url
    finally:
        server.stop()


def _pane(session: str) -> str:
    return subprocess.run(
        ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True, check=False
    ).stdout


def test_redrive_all_shows_a_progress_bar_then_the_count(server_with_dead_letters: str) -> None:
    session = f"eru-dlq-{uuid.uuid4().hex[:8]}"
    # the pane stays open after the verb (sleep) so its last lines can be read; the session is killed at the end
    verb = f"{sys.executable} -m eru.cli dlq redrive --all --nats {server_with_dead_letters}"
    command = f"{verb}; echo EXIT=$?; sleep 120"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "20", command], check=True)
    try:
        seen_bar = False
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            pane = _pane(session)
            seen_bar = seen_bar or ("redriving" in pane and "%" in pane)
            if "EXIT=" in pane:
                break
            time.sleep(0.05)
        assert seen_bar, pane
        assert f"redriven {LETTERS} dead letters" in pane
        assert "EXIT=0" in pane
        assert "Traceback" not in pane
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False, capture_output=True)
