"""A service process's loopback HTTP endpoints: /healthz, /readyz and Prometheus /metrics, and a clean SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest

from eru.bus.errors import RemoteError
from eru.bus.requests import request
from eru.bus.subjects import DISTRIBUTOR_PLACE
from eru.domain import PlacementSlot, PlaceReply, PlaceRequest
from eru.testing.nats_server import free_port

pytestmark = pytest.mark.timeout(90)


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _metric(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {name}{{{wanted}}} in /metrics")


def _start_distributor(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "eru_distributor"], env=env, stderr=subprocess.DEVNULL)


async def test_distributor_serves_health_readiness_and_metrics(nats_url: str, nc: Any) -> None:
    port = free_port()
    env = {**os.environ, "ERU_BUS__URL": nats_url, "ERU_HEALTH_PORT": str(port), "ERU_REPLICA": "d-1"}
    process = _start_distributor(env)
    try:
        for _ in range(150):
            try:
                if _get(port, "/readyz")[0] == 200:
                    break
            except OSError:
                pass
            await asyncio.sleep(0.1)
        assert _get(port, "/healthz") == (200, "ok\n")
        assert _get(port, "/readyz") == (200, "ok\n")
        assert _get(port, "/nothing-here")[0] == 404

        place = PlaceRequest(mode="auto", count=3, slots=[PlacementSlot(name="a", capacity=5)])
        reply = await request(nc, DISTRIBUTOR_PLACE, place, PlaceReply, timeout=5)
        assert reply.placements == {"a": 3}
        with pytest.raises(RemoteError):
            await request(nc, DISTRIBUTOR_PLACE, place.model_copy(update={"mode": "nope"}), PlaceReply, timeout=5)

        status, text = _get(port, "/metrics")
        assert status == 200
        assert _metric(text, "eru_requests_total", subject=DISTRIBUTOR_PLACE, outcome="ok") == 1.0
        assert _metric(text, "eru_requests_total", subject=DISTRIBUTOR_PLACE, outcome="error") == 1.0
        assert _metric(text, "eru_errors_total", code="invalid_input") == 1.0
        assert _metric(text, "eru_request_seconds_count", subject=DISTRIBUTOR_PLACE) == 2.0

        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
