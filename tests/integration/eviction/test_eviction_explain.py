"""`eru explain <eviction decision id> -o json` on a real eviction decision read back from the bus (a real
nats-server and eviction replica): the node's window, its watermarks and each batch container with why it was or
was not chosen (docs/colocation.md "Every eviction explained")."""

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


def _explain(nats_url: str, decision_id: str, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eru.cli", "explain", decision_id, "--nats", nats_url, *options],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_a_real_memory_eviction_is_explained_from_its_recorded_input(nats_url: str, nc: Any, js: Any) -> None:
    found = await collect(nc)
    replica = await start_replica(nats_url, "r1")
    try:
        # 45 of 64 GiB (70.3 % ≥ memory_evict 70 %): b0 (priority 0) goes; b1 (priority 1) is not needed.
        sample = metrics(
            "n2", time.time(), node_cpu=12.0, batch={"b0": 0.5, "b1": 0.5}, node_memory=45 * GIB, batch_memory=2 * GIB
        )
        await send(js, sample)
        await found.wait_for(lambda f: any(e.kind == "evict" for e in f.events))
    finally:
        await replica.stop()
    event = next(e for e in found.events if e.kind == "evict")
    result = await asyncio.to_thread(_explain, nats_url, event.decision_id, "-o", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    assert doc["kind"] == "evict"
    assert doc["decision_id"] == event.decision_id
    assert doc["same"] is True
    window = doc["window"]
    assert window["node"] == "n2"
    assert window["watermarks"]["memory_evict"] == 70
    assert window["newest"]["node_memory_percent"] == pytest.approx(70.3125)
    rows = {row["id"]: row for row in doc["containers"]}
    assert set(rows) == {"b0", "b1"}
    assert rows["b0"]["chosen"] is True
    assert rows["b0"]["why"].startswith("chosen for memory: rank 1")
    assert rows["b1"]["chosen"] is False
    assert rows["b1"]["why"].startswith("not needed for memory")
    assert [v.container_id for v in event.victims] == ["b0"]
    text = await asyncio.to_thread(_explain, nats_url, event.decision_id)
    assert text.returncode == 0, text.stdout + text.stderr
    assert "chosen for memory" in text.stdout
    assert "memory_evict 70" in text.stdout
