"""`eru status` shows the watermarks (docs/colocation.md "Watermarks set live", docs/cli.md `eru.cli/status`): what
the eviction replicas' environment gives (told in their `$SRV.INFO` metadata) and every live override the allocator
holds, in text and JSON, with a real nats-server, PostgreSQL, allocator and an eviction replica's service record.
With the allocator away it says the overrides are unknown and still answers; with no bus at all, the same."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import pytest
from pipeline_harness import Pipeline, eru_cli

from eru.bus.connection import connect
from eru.service import ServiceContext, _register_micro_service
from eru.settings import Settings

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


async def _status(*args: str) -> tuple[int, dict[str, Any]]:
    """`eru status -o json ARGS` as a process: its exit code and the document on stdout."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "eru.cli",
        "status",
        "-o",
        "json",
        "--timeout",
        "1",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "COLUMNS": "200"},
    )
    out, err = await process.communicate()
    assert b"Traceback" not in err, err.decode()[-2000:]
    return process.returncode or 0, json.loads(out)


async def test_status_shows_the_environment_and_every_override(nats_url: str, postgres_dsn: str) -> None:
    nc = await connect(nats_url, name="eviction-r1")
    environment = {"watermarks": {"cpu_evict": 80}, "pods": {"p1": {"cpu_suppress": 70, "window_seconds": 60}}}
    ctx = ServiceContext(
        name="eviction", settings=Settings(replica="r1", eviction=environment), nc=nc, js=nc.jetstream(), pool=None
    )
    service = await _register_micro_service(ctx)
    pipeline = Pipeline(nats_url, postgres_dsn)
    try:
        # no allocator yet: the overrides are unknown, the environment is known, status still answers
        code, doc = await _status("--nats", nats_url)
        assert code == 1  # not healthy (no allocator), but answered
        part = doc["watermarks"]
        assert part["state"] == "unavailable", part
        assert "allocator" in part["detail"]
        assert part["overrides"] == []
        defaults = part["environment"]["defaults"]
        watermarks = {key: defaults[key] for key in ("cpu_forbid", "cpu_suppress", "cpu_evict", "memory_forbid")}
        assert watermarks == {"cpu_forbid": 65, "cpu_suppress": 65, "cpu_evict": 80, "memory_forbid": 65}
        assert part["environment"]["pods"] == {"p1": {"cpu_suppress": 70}}

        await pipeline.start()
        await pipeline.register("n1")
        await pipeline.register("n2", pod="p2")
        code, out = await eru_cli("node", "set", "n1", "--watermark", "cpu_evict=72", "--nats", nats_url)
        assert code == 0, out
        code, out = await eru_cli("pod", "set", "p1", "--watermark", "memory_evict=80", "--nats", nats_url)
        assert code == 0, out
        code, out = await eru_cli("pod", "set", "p2", "--watermark", "cpu_forbid=50", "--nats", nats_url)
        assert code == 0, out
        code, out = await eru_cli("pod", "set", "p2", "--clear-watermarks", "--nats", nats_url)
        assert code == 0, out

        _code, doc = await _status("--nats", nats_url)
        part = doc["watermarks"]
        assert part["state"] == "known", part
        assert [(o["scope"], o["name"], o["settings"]) for o in part["overrides"]] == [
            ("node", "n1", {"cpu_evict": 72}),
            ("pod", "p1", {"memory_evict": 80}),
        ]  # a cleared override is not listed
        assert part["environment"]["defaults"]["cpu_evict"] == 80

        code, text = await eru_cli("status", "--timeout", "1", "--nats", nats_url)
        assert "Traceback" not in text, text
        assert "watermarks (environment): cpu_forbid=65 cpu_suppress=65 cpu_evict=80 memory_forbid=65" in text, text
        assert "pod p1 (environment): cpu_suppress=70" in text
        assert "node n1: cpu_evict=72 (version 1)" in text
        assert "pod p1: memory_evict=80 (version 1)" in text
        assert "p2" not in text.split("watermark overrides")[-1]
    finally:
        await pipeline.close()
        await service.stop()
        await nc.close()


async def test_status_with_no_bus_says_the_overrides_are_unknown() -> None:
    code, doc = await _status("--nats", "nats://127.0.0.1:9")
    assert code == 1
    assert doc["nats"]["state"] == "down"
    assert doc["watermarks"] == {
        "state": "unavailable",
        "detail": "no bus: the overrides are unknown",
        "environment": None,
        "overrides": [],
    }
