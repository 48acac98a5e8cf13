"""Where a slow deploy of the soak spent its time (bench/soak.py `--trace`, docs/performance.md "Tracing a request").

The soak's client already knows when it published a request and when the answer came. The tracer also listens,
as a plain subscriber, to what the stack publishes on the way (core NATS sees every JetStream publish):

    publish ─ reply ─ `planned` event ─ node command (per container) ─ agent's result (per container) ─ terminal event

and for each ended deploy records the time of every hop (monotonic, relative to its publish). Per sample window it
prints the p50/p99 of each hop and the slowest deploys' hops with their wall-clock time, to find the stage that
waits (a batching timer, a poll interval, a lock) rather than guess.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.soak_probe import percentile

HOPS = ("reply", "planned", "command", "agent", "event_to_end")
SLOWEST = 3  # traced deploys printed per window


class Tracer:
    """Hop times of deploys, from the subjects the stack publishes on."""

    def __init__(self) -> None:
        self.published: dict[str, float] = {}  # request id → publish time
        self.deploy_of_request: dict[str, str] = {}
        self.replied: dict[str, float] = {}  # deploy id → reply time
        self.planned: dict[str, float] = {}  # deploy id → `planned` event seen
        self.commanded: dict[str, tuple[float, str]] = {}  # container id → first command seen, node
        self.results: dict[str, list[tuple[float, float, str]]] = {}  # deploy id → per container: command, result, node
        self.window_rows: list[dict[str, Any]] = []

    async def attach(self, nc: Any) -> None:
        """Subscribe to node commands and container results (the soak's client already gets deploy events)."""
        await nc.subscribe("eru.node.*.cmd.*", cb=self.on_command)
        await nc.subscribe("eru.group.*.cmd.batch", cb=self.on_command)  # a sim process's group (one per batch)
        await nc.subscribe("eru.container.*.*", cb=self.on_result)
        await nc.subscribe("eru.group.*.results", cb=self.on_result)

    def on_publish(self, request_id: str, at: float) -> None:
        self.published[request_id] = at

    def on_reply(self, request_id: str, deploy_id: str, at: float) -> None:
        started = self.published.pop(request_id, None)
        if started is None:
            return
        self.published[deploy_id] = started
        self.replied[deploy_id] = at

    def on_deploy_event(self, deploy_id: str, kind: str, at: float) -> None:
        if kind == "planned":
            self.planned.setdefault(deploy_id, at)
            return
        if kind not in ("completed", "partial", "failed"):
            return
        started = self.published.pop(deploy_id, None)
        replied = self.replied.pop(deploy_id, None)
        planned = self.planned.pop(deploy_id, None)
        pairs = self.results.pop(deploy_id, [])
        if started is None or replied is None:
            return
        commanded = max((p[0] for p in pairs), default=None)
        result = max((p[1] for p in pairs), default=None)
        slowest = max(pairs, key=lambda p: p[1] - p[0], default=None)
        row: dict[str, Any] = {
            "deploy": deploy_id,
            "wall": time.strftime("%H:%M:%S", time.gmtime(time.time() - (time.perf_counter() - started))),
            "total": 1000 * (at - started),
            "reply": 1000 * (replied - started),
            "planned": 1000 * (planned - started) if planned is not None else None,
            "command": 1000 * (commanded - started) if commanded is not None else None,
            "agent": 1000 * (result - commanded) if result is not None and commanded is not None else None,
            "event_to_end": 1000 * (at - result) if result is not None else None,
        }
        if slowest is not None:  # the container the agent took longest for: its node and when (wall clock)
            row["slow_node"] = slowest[2]
            row["slow_command_at"] = round(time.time() - (time.perf_counter() - slowest[0]), 3)
        self.window_rows.append(row)

    async def on_command(self, msg: Any) -> None:
        from eru.bus.codec import decode
        from eru.domain import GroupCommands, NodeCommand, NodeCommands

        now = time.perf_counter()
        if msg.subject.startswith("eru.group."):
            commands = decode(msg.data, GroupCommands).commands
        elif msg.subject.endswith(".cmd.batch"):
            commands = decode(msg.data, NodeCommands).commands
        elif msg.subject.endswith(".cmd.create"):
            commands = [decode(msg.data, NodeCommand)]
        else:
            return
        for command in commands:
            if command.kind == "create":
                self.commanded.setdefault(command.container_id, (now, command.node))

    async def on_result(self, msg: Any) -> None:
        from eru.bus.codec import decode
        from eru.domain import ContainerEvent, ContainerEvents, GroupEvents

        now = time.perf_counter()
        if msg.subject.endswith(".results"):
            events = decode(msg.data, GroupEvents).events
        elif msg.subject.endswith(".batch"):
            events = decode(msg.data, ContainerEvents).events
        elif msg.subject.endswith((".started", ".failed")):
            events = [decode(msg.data, ContainerEvent)]
        else:
            return
        for event in events:
            commanded = self.commanded.pop(event.container_id, None)
            if event.kind in ("started", "failed") and event.deploy_id and commanded is not None:
                self.results.setdefault(event.deploy_id, []).append((commanded[0], now, commanded[1]))

    def window(self) -> dict[str, Any]:
        """Hop percentiles of the deploys that ended in the window, and its slowest deploys; then reset."""
        rows, self.window_rows = self.window_rows, []
        out: dict[str, Any] = {"traced": len(rows)}
        for hop in HOPS:
            values = [r[hop] for r in rows if r[hop] is not None]
            out[f"{hop}_p50_ms"] = round(statistics.median(values), 1) if values else None
            out[f"{hop}_p99_ms"] = round(percentile(values, 0.99), 1) if values else None
        slowest = sorted(rows, key=lambda r: r["total"], reverse=True)[:SLOWEST]
        out["slowest"] = [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()} for r in slowest]
        by_agent = sorted((r for r in rows if r["agent"] is not None), key=lambda r: r["agent"], reverse=True)
        out["slowest_agent"] = [
            {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()} for r in by_agent[:SLOWEST]
        ]
        # forget commands whose results never came (removed before starting): bounded memory over a long soak
        if len(self.commanded) > 50_000:
            self.commanded.clear()
        return out
