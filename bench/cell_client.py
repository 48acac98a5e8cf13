"""The cell bench's client (bench/bench_cell.py): a user's program, not eru's — plain nats-py and msgpack, no import
of the eru package. It speaks the wire contract of docs/bus.md: a deploy request is a msgpack map published to
JetStream on `eru.deploy.request` with the CloudEvents headers (`ce-*`, `Nats-Msg-Id`) and `Eru-Reply-To`; the
allocator answers on that subject (`{"status": "accepted", "deploy_id": …}` or an error with `Eru-Status: error`),
and the deploy's progress is on `eru.deploy.<deploy_id>.<kind>`, `completed`/`partial`/`failed` being terminal.

Usage: python bench/cell_client.py --url NATS_URL --containers 50000 [--request-size 100] [--tag T]
Sends every request at once, waits until each is answered and each accepted deploy has ended, and prints one JSON
document on stdout: counts, outcomes, seconds, containers/s, latencies and its own CPU seconds. A progress bar (rich)
on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import statistics
import time
import uuid
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import msgpack
import nats
import rich.console
import rich.progress

TERMINAL = ("completed", "partial", "failed")


def headers_for(reply_inbox: str) -> tuple[str, dict[str, str]]:
    """A new message id and the headers of one request (docs/bus.md "Envelope")."""
    message_id = str(uuid.uuid4())
    now = datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    return message_id, {
        "ce-specversion": "1.0",
        "ce-id": message_id,
        "ce-type": "eru.deploy.request",
        "ce-source": "bench-cell-client",
        "ce-time": now,
        "ce-correlationid": message_id,
        "Nats-Msg-Id": message_id,
        "Content-Type": "application/msgpack",
        "Eru-Reply-To": f"{reply_inbox}.{message_id}",
    }


def request_body(index: int, count: int, tag: str, cpu: float, memory_mib: int) -> bytes:
    """One deploy request of `count` containers of `cpu` cores and `memory_mib` MiB each."""
    return msgpack.packb(
        {
            "request_id": f"{tag}-{index}",
            "pod": "default",
            "count": count,
            "mode": "auto",
            "workload": {
                "name": f"{tag}-{index % 20}",
                "image": "busybox",
                "resources": {"cpu_request": cpu, "memory_request": memory_mib * 1024 * 1024},
            },
        }
    )


class Progress:
    """A progress bar on stderr (rich, as the CLI's): `label ━━━━━━━━╺━━━━ done/total elapsed extra`."""

    def __init__(self, label: str, total: int, enabled: bool = True) -> None:
        self.enabled = enabled and total > 0
        self.bar = rich.progress.Progress(
            rich.progress.TextColumn("{task.description}"),
            rich.progress.BarColumn(),
            rich.progress.MofNCompleteColumn(),
            rich.progress.TimeElapsedColumn(),
            rich.progress.TextColumn("{task.fields[extra]}"),
            console=rich.console.Console(stderr=True),
            disable=not self.enabled,
        )
        self.task = self.bar.add_task(label, total=total, extra="")
        if self.enabled:
            self.bar.start()

    def show(self, done: int, extra: str = "") -> None:
        """Move the bar to `done` (with `extra` beside it)."""
        self.bar.update(self.task, completed=done, extra=extra)

    def close(self) -> None:
        """Stop the bar (its last state stays on stderr)."""
        if self.enabled:
            self.bar.stop()


class Client:
    """Requests sent, their answers and their deploys' terminal events."""

    def __init__(self, nc: Any) -> None:
        self.nc = nc
        self.inbox = nc.new_inbox()
        self.sent: dict[str, float] = {}  # message id → publish time
        self.answered: dict[str, tuple[float, dict[str, Any]]] = {}
        self.ended: dict[str, tuple[float, str]] = {}  # deploy id → (time, kind); may come before the answer
        self.changed = asyncio.Event()

    async def start(self) -> None:
        await self.nc.subscribe(f"{self.inbox}.*", cb=self.on_reply)
        await self.nc.subscribe("eru.deploy.*.*", cb=self.on_event)
        await self.nc.flush()

    async def on_reply(self, msg: Any) -> None:
        key = msg.subject.rsplit(".", 1)[1]
        if key not in self.answered:
            self.answered[key] = (time.perf_counter(), msgpack.unpackb(msg.data))
            self.changed.set()

    async def on_event(self, msg: Any) -> None:
        _, _, deploy_id, kind = msg.subject.split(".", 3)
        if kind in TERMINAL and deploy_id not in self.ended:
            self.ended[deploy_id] = (time.perf_counter(), kind)
            self.changed.set()

    def deploy_of(self, key: str) -> str | None:
        answer = self.answered.get(key)
        return answer[1].get("deploy_id") if answer and answer[1].get("status") == "accepted" else None

    def finished(self) -> int:
        """Requests answered, and refused or ended."""
        done = 0
        for key in self.answered:
            deploy = self.deploy_of(key)
            done += deploy is None or deploy in self.ended
        return done


async def run(args: argparse.Namespace) -> dict[str, Any]:
    user = urlsplit(args.url.split(",")[0]).username  # a user may read only its own inbox (docs/security.md)
    inbox_prefix = f"_INBOX_{user}" if user else "_INBOX"
    nc = await nats.connect(args.url, name="bench-cell-client", max_reconnect_attempts=-1, inbox_prefix=inbox_prefix)
    js = nc.jetstream()
    client = Client(nc)
    await client.start()
    sizes = [min(args.request_size, args.containers - start) for start in range(0, args.containers, args.request_size)]
    bodies = [request_body(i, n, args.tag, args.cpu, args.memory_mib) for i, n in enumerate(sizes)]
    progress = Progress("requests answered+ended", len(bodies), not args.quiet)
    started = time.perf_counter()
    acks = []
    for body in bodies:
        key, headers = headers_for(client.inbox)
        client.sent[key] = time.perf_counter()
        acks.append(await js.publish_async("eru.deploy.request", body, headers=headers))
    await asyncio.gather(*acks)
    published = time.perf_counter() - started
    try:
        async with asyncio.timeout(args.within):
            while (done := client.finished()) < len(bodies):
                progress.show(done, f"answered {len(client.answered)}")
                client.changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(client.changed.wait(), 0.5)
    except TimeoutError:
        pass  # what ended by then is reported: the bench tells complete from not
    progress.show(client.finished(), f"answered {len(client.answered)}")
    progress.close()
    await nc.close()
    return summary(client, sizes, started, published)


def summary(client: Client, sizes: list[int], started: float, published: float) -> dict[str, Any]:
    """The client's figures: counts, outcomes, seconds, containers/s, latencies, CPU."""
    deploys = {key: client.deploy_of(key) for key in client.sent}
    ends = [client.ended[d][0] for d in deploys.values() if d in client.ended]
    answers = [client.answered[k][0] for k in client.sent if k in client.answered]
    last = max([*ends, *answers], default=started)
    seconds = last - started
    reply = [client.answered[k][0] - t for k, t in client.sent.items() if k in client.answered]
    completed = [client.ended[d][0] - client.sent[k] for k, d in deploys.items() if d in client.ended]
    kinds = [client.ended[d][1] for d in deploys.values() if d in client.ended]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "requests": len(sizes),
        "containers": sum(sizes),
        "answered": len(client.answered),
        "refused": sum(1 for k in client.answered if deploys[k] is None),
        "refusals": sorted(
            {str(a[1].get("code")) for a in client.answered.values() if a[1].get("status") != "accepted"}
        ),
        "ended": len(kinds),
        "outcomes": {kind: kinds.count(kind) for kind in TERMINAL},
        "deploy_ids": sorted(d for d in deploys.values() if d),
        "seconds": round(seconds, 2),
        "publish_seconds": round(published, 2),
        "containers_per_second": round(sum(sizes) / seconds, 1) if seconds > 0 else None,
        "reply_p50_s": round(statistics.median(reply), 2) if reply else None,
        "completed_p50_s": round(statistics.median(completed), 2) if completed else None,
        "completed_max_s": round(max(completed), 2) if completed else None,
        "client_cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
        "client_max_rss_mib": round(usage.ru_maxrss / 1024, 1),
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("ERU_BUS_URL", "nats://127.0.0.1:4222"))
    parser.add_argument("--containers", type=int, default=50_000)
    parser.add_argument("--request-size", type=int, default=100)
    parser.add_argument("--cpu", type=float, default=0.1, help="cores per container")
    parser.add_argument("--memory-mib", type=int, default=64, help="MiB per container")
    parser.add_argument("--tag", default="cell")
    parser.add_argument("--within", type=float, default=1800.0, help="seconds to wait for every answer and end")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser.parse_args()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(parse_args()))))
