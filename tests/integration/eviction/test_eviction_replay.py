"""`eru replay` on a real eviction decision read back from the bus: it reproduces."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

import pytest
from eviction_helpers import GIB, collect, metrics, send, start_replica

pytestmark = pytest.mark.timeout(90)


async def test_a_real_memory_eviction_replays_from_the_bus(nats_url: str, nc: Any, js: Any) -> None:
    found = await collect(nc)
    replica = await start_replica(nats_url, "r1")
    try:
        sample = metrics(
            "n2", time.time(), node_cpu=12.0, batch={"b0": 0.5, "b1": 0.5}, node_memory=45 * GIB, batch_memory=2 * GIB
        )
        await send(js, sample)
        await found.wait_for(lambda f: any(e.kind == "evict" for e in f.events))
    finally:
        await replica.stop()
    event = next(e for e in found.events if e.kind == "evict")
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "eru.cli", "replay", event.decision_id, "--nats", nats_url, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    outcome = json.loads(result.stdout)
    assert outcome["kind"] == "evict"
    assert outcome["same"] is True
