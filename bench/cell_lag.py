"""Whether the eviction service keeps up with the nodes' metrics (bench/bench_cell.py, docs/performance.md "A cell of
10,000 nodes, on paper"). Two readings, taken from outside the service:

* **Counts.** A plain subscriber counts the samples published on `eru.metrics.*` (and their bytes); the eviction
  replica's `samples` counter comes from its NATS micro-service stats (`$SRV.STATS.eru-eviction`, the load it
  reports, refreshed every third of its lease TTL). Per phase: samples handled per second against published per
  second, and the backlog (published − handled since the first reading), also in seconds of samples.
* **Probes.** Every `probe_every` seconds one sample of a node of its own (`lagprobe-…`, never registered, no
  containers) is published on core NATS behind the nodes' samples; its first sample makes the eviction service
  publish the node's condition (`eru.node.<node>.condition`), so publish → condition is the time a sample waits in
  the service's queue plus its handling. A probe handled more than two metrics intervals (the eviction's
  `metrics_interval_seconds`, 5 s by default) after its time is stale and decides nothing: it is counted as
  `probes_unanswered`, and the counts above tell by how much the service is behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
from typing import Any

from eru.bus.codec import encode_value
from eru.envelope import new_id

STATS_SUBJECT = "$SRV.STATS.eru-eviction"


class LagMonitor:
    """Counts and probes over named phases (`phase(name)` switches; `report()` gives the figures per phase)."""

    def __init__(self, nc: Any, tag: str, probe_every: float = 2.0, probe_timeout: float = 15.0) -> None:
        self.nc, self.tag = nc, tag
        self.probe_every, self.probe_timeout = probe_every, probe_timeout
        self.published = 0
        self.published_bytes = 0
        self.readings: list[tuple[str, float, int, int, int]] = []  # phase, time, published, bytes, handled
        self.probes: list[tuple[str, float | None]] = []  # phase, seconds (None: no condition within the timeout)
        self.current = "idle"
        self._tasks: list[asyncio.Task[None]] = []
        self._answers: dict[str, asyncio.Future[float]] = {}
        self._count = 0

    async def start(self) -> None:
        await self.nc.subscribe("eru.metrics.*", cb=self._on_sample)
        await self.nc.subscribe("eru.node.*.condition", cb=self._on_condition)
        await self.nc.flush()
        self._tasks = [asyncio.create_task(self._read_loop()), asyncio.create_task(self._probe_loop())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def phase(self, name: str) -> None:
        """Start a phase now (its first reading is taken at once by the next loop turn)."""
        self.current = name

    async def _on_sample(self, msg: Any) -> None:
        self.published += 1  # the probes too: the service counts them among its samples
        self.published_bytes += len(msg.data)

    async def _on_condition(self, msg: Any) -> None:
        node = msg.subject.split(".")[2]
        waiting = self._answers.get(node)
        if waiting is not None and not waiting.done():
            waiting.set_result(time.perf_counter())

    async def handled(self) -> int | None:
        """The eviction replica's `samples` counter (None when it does not answer within 5 s)."""
        try:
            reply = await self.nc.request(STATS_SUBJECT, b"", timeout=5)
        except Exception:
            return None
        stats = json.loads(reply.data)
        for endpoint in stats.get("endpoints") or []:
            data = endpoint.get("data") or {}
            if "samples" in data:
                return int(data["samples"])
        return None

    async def _read_loop(self) -> None:
        while True:
            handled = await self.handled()
            if handled is not None:
                self.readings.append((self.current, time.perf_counter(), self.published, self.published_bytes, handled))
            await asyncio.sleep(2.0)

    async def _probe_loop(self) -> None:
        while True:
            self._tasks.append(asyncio.create_task(self._probe(self.current)))
            await asyncio.sleep(self.probe_every)

    async def _probe(self, phase: str) -> None:
        self._count += 1
        node = f"lagprobe-{self.tag}-{self._count}"
        answer: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._answers[node] = answer
        sample = {
            "node": node,
            "time": time.time(),
            "cpu_capacity": 32.0,
            "cpu_used": 1.0,
            "memory_used": 1024**3,
            "memory_total": 64 * 1024**3,
            "containers": [],
        }
        message_id = new_id()
        headers = {
            "ce-specversion": "1.0", "ce-id": message_id, "ce-type": "eru.metrics", "ce-source": "bench-cell-lag",
            "ce-time": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime()), "ce-correlationid": message_id,
            "Content-Type": "application/msgpack",
        }  # fmt: skip
        sent = time.perf_counter()
        await self.nc.publish(f"eru.metrics.{node}", encode_value(sample), headers=headers)
        try:
            seconds: float | None = await asyncio.wait_for(answer, self.probe_timeout) - sent
        except TimeoutError:
            seconds = None
        finally:
            self._answers.pop(node, None)
        self.probes.append((phase, seconds))

    def report(self) -> dict[str, Any]:
        """Per phase: samples published and handled per second, the backlog, the probes' publish → condition."""
        phases: dict[str, Any] = {}
        base = self.readings[0] if self.readings else None
        for name in dict.fromkeys(p for p, *_ in self.readings):
            rows = [r for r in self.readings if r[0] == name]
            first, last = rows[0], rows[-1]
            seconds = last[1] - first[1]
            figures: dict[str, Any] = {"seconds": round(seconds, 1)}
            if seconds > 0 and base is not None:
                published = (last[2] - first[2]) / seconds
                handled = (last[4] - first[4]) / seconds
                backlog = (last[2] - base[2]) - (last[4] - base[4])
                figures |= {
                    "published_per_second": round(published, 1),
                    "handled_per_second": round(handled, 1),
                    "sample_bytes_per_second": round((last[3] - first[3]) / seconds),
                    "backlog_samples_at_end": backlog,
                    "backlog_seconds_at_end": round(backlog / published, 1) if published else None,
                }
            answered = sorted(s for p, s in self.probes if p == name and s is not None)
            figures |= {
                "probes": sum(1 for p, _ in self.probes if p == name),
                "probes_unanswered": sum(1 for p, s in self.probes if p == name and s is None),
                "probe_p50_ms": round(1000 * statistics.median(answered), 1) if answered else None,
                "probe_max_ms": round(1000 * answered[-1], 1) if answered else None,
            }
            phases[name] = figures
        return phases
