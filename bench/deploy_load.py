"""The load `bench_deploy.py` sends and what it measures per request: bursts of deploy requests published at once,
an open-loop steady rate of single-container requests, and this machine's raw nats-py request/reply rate (the
ceiling). Each request carries `Eru-Reply-To`; a `Watcher` records when it was published, answered and completed."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import nats.errors

from eru.bus import connect, new_envelope
from eru.bus.codec import MSGPACK, decode, decode_value, encode
from eru.bus.publish import message_headers
from eru.bus.replies import H_REPLY_TO
from eru.bus.subjects import DEPLOY_REQUEST
from eru.domain import DeployEvent, DeployRequest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trace_deploys import Tap  # bench/ is not a package: the tap lives beside this script

TERMINAL = ("completed", "partial", "failed")


def percentile(values: list[float], fraction: float) -> float:
    """The `fraction` percentile (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


class Watcher:
    """One client connection that sends deploy requests with `Eru-Reply-To` and records, per request, when it was
    published, answered (the allocator's reply) and completed (its deploy's terminal event)."""

    def __init__(self, nc: Any) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.inbox = nc.new_inbox()
        self.sent: dict[str, float] = {}  # request envelope id → publish time
        self.answered: dict[str, float] = {}
        self.finished: dict[str, float] = {}  # request envelope id → terminal event time
        self.outcome: dict[str, str] = {}
        self.errors: dict[str, str] = {}  # request envelope id → error code of its reply
        self._deploy_request: dict[str, str] = {}  # deploy id → request envelope id
        self._early: dict[str, tuple[float, str]] = {}  # terminal events seen before the planned event
        self.changed = asyncio.Event()

    async def start(self) -> None:
        await self.nc.subscribe("eru.deploy.*.*", cb=self._on_event)
        await self.nc.subscribe(f"{self.inbox}.*", cb=self._on_reply)
        await self.nc.flush()

    async def _on_reply(self, msg: Any) -> None:
        key = msg.subject.rsplit(".", 1)[1]
        self.answered.setdefault(key, time.perf_counter())
        if (msg.headers or {}).get("Eru-Status") == "error":
            self.errors[key] = str(decode_value(msg.data, MSGPACK).get("code"))
        self.changed.set()

    async def _on_event(self, msg: Any) -> None:
        if msg.subject == DEPLOY_REQUEST:
            return
        now = time.perf_counter()
        event = decode(msg.data, DeployEvent)
        if event.kind == "planned" or (event.kind in TERMINAL and event.deploy_id not in self._deploy_request):
            cause = (msg.headers or {}).get("ce-causationid", "")  # the request's envelope id
            if cause in self.sent:
                self._deploy_request[event.deploy_id] = cause
                if event.deploy_id in self._early:
                    at, kind = self._early.pop(event.deploy_id)
                    self.finished.setdefault(cause, at)
                    self.outcome.setdefault(cause, kind)
            elif event.kind in TERMINAL:
                self._early[event.deploy_id] = (now, event.kind)
        if event.kind in TERMINAL:
            key = self._deploy_request.get(event.deploy_id)
            if key is not None:
                self.finished.setdefault(key, now)
                self.outcome.setdefault(key, event.kind)
        self.changed.set()

    async def publish(self, request: DeployRequest) -> Any:
        """Publish one request now (not waiting for JetStream's ack); returns the ack's future.

        `publish_async` is a coroutine: nothing is sent until it is awaited, so it is awaited here, at the request's
        send time (a list of unawaited calls gathered later sent a steady run's every request at its end)."""
        envelope = new_envelope("eru.deploy.request", "bench")
        headers = {**message_headers(envelope), H_REPLY_TO: f"{self.inbox}.{envelope.id}"}
        self.sent[envelope.id] = time.perf_counter()
        return await self.js.publish_async(DEPLOY_REQUEST, encode(request), headers=headers)

    def done(self, key: str) -> bool:
        """Answered, and either refused or ended."""
        return key in self.answered and (key in self.errors or key in self.finished)

    async def wait_all(self, within: float) -> None:
        async with asyncio.timeout(within):
            while not all(self.done(key) for key in self.sent):
                self.changed.clear()
                await self.changed.wait()


async def burst(nats_url: str, requests: list[DeployRequest], within: float) -> dict[str, Any]:
    """Publish every request at once; wait for every reply and terminal event; latency per request (publish → the
    terminal event), containers per second (placed, committed, started and answered)."""
    nc = await connect(nats_url, name="bench-client")
    watcher = Watcher(nc)
    await watcher.start()
    started = time.perf_counter()
    try:
        acks = [await watcher.publish(request) for request in requests]
        await asyncio.gather(*acks)
        await watcher.wait_all(within)
    finally:
        await nc.close()
    elapsed = max([*watcher.finished.values(), *watcher.answered.values()]) - started
    latencies = [watcher.finished[key] - sent for key, sent in watcher.sent.items() if key in watcher.finished]
    replies = [watcher.answered[key] - sent for key, sent in watcher.sent.items() if key in watcher.answered]
    containers = sum(r.count for r in requests)
    return {
        "requests": len(requests),
        "containers": containers,
        "seconds": round(elapsed, 3),
        "containers_per_second": round(containers / elapsed, 1),
        "requests_per_second": round(len(requests) / elapsed, 1),
        "latency_p50_ms": _ms(statistics.median(latencies)) if latencies else None,
        "latency_p99_ms": _ms(percentile(latencies, 0.99)) if latencies else None,
        "reply_p50_ms": _ms(statistics.median(replies)) if replies else None,
        "outcomes": {kind: list(watcher.outcome.values()).count(kind) for kind in TERMINAL},
        "refused": len(watcher.errors),
    }


async def steady(
    nats_url: str, rate: float, seconds: float, tag: str, pods: int, within: float, tap_to: Path | None = None
) -> dict[str, Any]:
    """Open loop: single-container requests at a fixed `rate` for `seconds` (each sent at its time, whatever the
    answers do); p50/p99 of publish → reply and publish → completed. With `tap_to`, every message on the server is
    written there for `bench/trace_deploys.py` (the hops of each deploy)."""
    nc = await connect(nats_url, name="bench-steady")
    watcher = Watcher(nc)
    await watcher.start()
    tap = Tap(nc) if tap_to is not None else None
    if tap is not None:
        await tap.start()
    total = max(1, round(rate * seconds))
    requests = requests_of(1, total, tag, pods)
    acks = []
    late = 0.0
    started = time.perf_counter()
    try:
        for index, request in enumerate(requests):
            due = started + index / rate
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            else:
                late = max(late, -wait)
            acks.append(await watcher.publish(request))
        sending = time.perf_counter() - started
        await asyncio.gather(*acks)
        await watcher.wait_all(within)
    finally:
        await nc.close()
    if tap is not None and tap_to is not None:
        tap.dump(tap_to, watcher.sent)
    replies = [watcher.answered[key] - sent for key, sent in watcher.sent.items() if key in watcher.answered]
    completed = [watcher.finished[key] - sent for key, sent in watcher.sent.items() if key in watcher.finished]
    return {
        "rate_asked": rate,
        "rate_sent": round(total / sending, 1) if sending > 0 else None,
        "most_late_send_ms": _ms(late),
        "requests": total,
        "reply_p50_ms": _ms(statistics.median(replies)),
        "reply_p99_ms": _ms(percentile(replies, 0.99)),
        "completed_p50_ms": _ms(statistics.median(completed)),
        "completed_p99_ms": _ms(percentile(completed, 0.99)),
        "outcomes": {kind: list(watcher.outcome.values()).count(kind) for kind in TERMINAL},
        "refused": len(watcher.errors),
    }


def _ms(seconds: float) -> float:
    return round(1000 * seconds, 1)


async def raw_request_reply(nats_url: str, total: int = 5000, concurrency: int = 64) -> float:
    """Requests per second of plain nats-py request/reply against an echo responder on this machine."""
    server = await connect(nats_url, name="bench-echo")
    client = await connect(nats_url, name="bench-echo-client")

    async def echo(msg: Any) -> None:
        await msg.respond(msg.data)

    await server.subscribe("bench.echo", cb=echo)
    await server.flush()
    payload = b"x" * 200
    for _ in range(100):  # on a loaded machine the first requests may beat the subscription's interest
        try:
            await client.request("bench.echo", payload, timeout=10)
            break
        except nats.errors.NoRespondersError:
            await asyncio.sleep(0.1)
    left = total

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await client.request("bench.echo", payload, timeout=10)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    await client.close()
    await server.close()
    return total / elapsed


def requests_of(size: int, how_many: int, tag: str, pods: int = 1) -> list[DeployRequest]:
    """`how_many` requests of `size` memory-light, cpu-bound fractional containers each (10 pieces), spread over
    `pods` pods in turn."""
    return [
        DeployRequest.model_validate(
            {
                "request_id": f"{tag}-{i}",
                "pod": pod_name(i, pods),
                "count": size,
                "mode": "auto",
                "workload": {
                    "name": f"{tag}-{i % 10}",
                    "image": "busybox",
                    "resources": {"cpu_bind": True, "cpu_request": 0.1, "memory_request": "16MiB"},
                },
            }
        )
        for i in range(how_many)
    ]


def pod_name(index: int, pods: int) -> str:
    """The pod of node or request `index` when the nodes are split over `pods` pods."""
    return "bench" if pods == 1 else f"bench{index % pods}"
