"""What the dead-letter gate costs (eru_allocator.delivery.dead_letter_gate, docs/performance.md "The dead-letter
gate per batch"): one JetStream consumer-info request per deploy batch. On a real nats-server with ERU_DLQ and the
recorder's consumer, `--requests` gate checks one after the other; CPU of this process (the allocator's side) and of
nats-server per check, and what that is per container at the batch sizes the stack forms (a 2,000-single burst:
~90 per batch; a steady 300/s: ~5–10).

    python bench/bench_dead_letter_gate.py [--requests 2000]

Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

from nats.js.api import AckPolicy, ConsumerConfig

from eru.bus import connect
from eru.bus.protocol import NatsBus
from eru.bus.streams import DLQ, provision_streams
from eru.logging import configure_logging
from eru.testing.nats_server import NatsServer
from eru_allocator.delivery.dead_letter_gate import DeadLetterGate
from eru_allocator.delivery.dead_letter_recorder import DEAD_LETTER_CONSUMER


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run(requests: int, root: Path) -> dict[str, float]:
    """Checks one after the other on a fresh server."""
    server = NatsServer(store_dir=root / "nats")
    server.start()
    try:
        nc = await connect(server.url, name="bench-gate")
        try:
            js = nc.jetstream()
            await provision_streams(js)
            await js.add_consumer(DLQ, ConsumerConfig(durable_name=DEAD_LETTER_CONSUMER, ack_policy=AckPolicy.EXPLICIT))
            gate = DeadLetterGate(NatsBus(nc))
            assert await gate.check() is None
            assert server.pid is not None
            server_before, wall = process_cpu_seconds(server.pid), time.perf_counter()
            started = time.process_time()
            for _ in range(requests):
                await gate.wait()
            client = time.process_time() - started
            wall = time.perf_counter() - wall
            served = process_cpu_seconds(server.pid) - server_before
        finally:
            await nc.close()
    finally:
        server.stop()
    per_check = (client + served) * 1000 / requests
    return {
        "allocator_ms_per_check": round(client * 1000 / requests, 4),
        "nats_server_ms_per_check": round(served * 1000 / requests, 4),
        "wall_ms_per_check": round(wall * 1000 / requests, 4),
        "ms_per_container_at_90_per_batch": round(per_check / 90, 5),
        "ms_per_container_at_5_per_batch": round(per_check / 5, 5),
    }


def main() -> None:
    """Parse arguments, run, print JSON."""
    configure_logging("bench", "bench", log_format="json", level="warning")
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="eru-bench-gate-") as state:
        figures = asyncio.run(run(args.requests, Path(state)))
    print(json.dumps({"benchmark": "dead_letter_gate", "requests": args.requests, **figures}))


if __name__ == "__main__":
    main()
