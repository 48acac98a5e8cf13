"""A NATS server killed mid-burst on `eru up --nats-cluster 3` (docs/deploy.md "Failover, measured"): one client
sends single-container deploys at a steady rate to all three servers, the server leading ERU_DEPLOY is killed -9
after `kill_after` answers, and what became of every request, the ledger and the rate of answers is returned.

Used by tests/e2e/test_nats_cluster.py (which asserts on it) and bench/bench_nats_failover.py (which prints it).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import os
import signal
import statistics
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from eru.bus import connect, new_envelope
from eru.bus.codec import decode_value, encode
from eru.bus.connection import split_urls
from eru.bus.consumer import H_REPLY_TO
from eru.bus.publish import message_headers
from eru.bus.subjects import DEPLOY_REQUEST
from eru.domain import DeployRequest
from eru.testing.asking import PUBLISH_ACK_SECONDS, Progress, ask_until_answered, store
from eru.testing.cluster_stack import ClusterStack
from eru.testing.ledger_checks import usage_problems

TOTAL = 1000
RATE = 50.0  # requests per second the client sends (a steady stream the stack keeps up with)
KILL_AFTER = 300  # answers received before the kill: mid-burst, with a measured rate before it
WINDOW = 5.0  # seconds over which the rate after the kill is compared with the rate before it (3+ batches)


@dataclass
class Client:
    """A client sending deploy requests on one connection (to all three servers) and timing the answers."""

    nc: NatsClient
    inbox: str
    answers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    answered_at: dict[str, float] = field(default_factory=dict)
    stored: set[str] = field(default_factory=set)
    total: int = TOTAL
    kill_after: int = KILL_AFTER
    publish_retries: int = 0
    all_answered: asyncio.Event = field(default_factory=asyncio.Event)
    kill_point: asyncio.Event = field(default_factory=asyncio.Event)
    subject: str = DEPLOY_REQUEST  # a tenant's client: eru.t.<tenant>.deploy.request
    sent_at: dict[str, float] = field(default_factory=dict)
    asked_again: int = 0
    ack_wait: float = PUBLISH_ACK_SECONDS  # how long a publish waits for the stream's acknowledgement
    waiting: dict[str, asyncio.Event] = field(default_factory=dict)
    stored_at: dict[str, float] = field(default_factory=dict)
    progress: Progress = field(default_factory=Progress)
    askers: set[asyncio.Task[None]] = field(default_factory=set)

    async def on_reply(self, msg: Any) -> None:
        request_id = msg.subject.rsplit(".", 1)[-1]
        value = decode_value(msg.data, (msg.headers or {}).get("Content-Type"))
        self.answers.setdefault(request_id, []).append(value if isinstance(value, dict) else {})
        self.answered_at.setdefault(request_id, time.monotonic())
        self.progress.answered(self.stored_at.get(request_id))
        if request_id in self.waiting:
            self.waiting[request_id].set()
        if len(self.answers) >= self.kill_after:
            self.kill_point.set()
        if len(self.answers) >= self.total:
            self.all_answered.set()

    async def send(self) -> None:
        """One single-container deploy, stored on the bus: a publish that times out (its server died) is sent
        again with the same id, which JetStream de-duplicates; an answer that does not come (lost while the client
        reconnected) is asked for again with the same request id (`eru.testing.asking`) — what any client does."""
        request_id = f"cluster-{uuid.uuid4().hex}"
        self.sent_at[request_id] = time.monotonic()
        request = DeployRequest.model_validate(
            {
                "request_id": request_id,
                "pod": "default",
                "count": 1,
                "workload": {
                    "name": "failover",
                    "image": "busybox",
                    "resources": {"cpu_request": 0.01, "memory_request": "1MiB"},
                },
            }
        )
        envelope = new_envelope("eru.deploy.request", "cluster-test", message_id=request_id)
        headers = {**message_headers(envelope), H_REPLY_TO: f"{self.inbox}.{request_id}"}
        body, js = encode(request), self.nc.jetstream()
        answered = self.waiting[request_id] = asyncio.Event()
        self.publish_retries += await store(js, self.subject, body, headers, time.monotonic() + 60, self.ack_wait)
        self.stored.add(request_id)
        self.stored_at[request_id] = time.monotonic()
        task = asyncio.create_task(self._ask_until_answered(js, body, headers, answered))
        self.askers.add(task)
        task.add_done_callback(self.askers.discard)

    async def _ask_until_answered(
        self, js: JetStreamContext, body: bytes, headers: dict[str, str], answered: Any
    ) -> None:
        self.asked_again += await ask_until_answered(
            js,
            self.subject,
            body,
            headers,
            answered,
            until=time.monotonic() + 170,
            progress=self.progress,
            ack_wait=self.ack_wait,
        )

    async def close(self) -> None:
        """Stop asking again and close the connection."""
        for task in list(self.askers):
            task.cancel()
        await asyncio.gather(*self.askers, return_exceptions=True)
        await self.nc.close()


def per_second(times: list[float], start: float, end: float) -> list[int]:
    """Answers in each whole second from `start` to `end` (a last partial second is left out)."""
    buckets = [0] * max(0, int(end - start))
    for moment in times:
        if start <= moment < start + len(buckets):
            buckets[int(moment - start)] += 1
    return buckets


def longest_silence(times: list[float], killed_at: float) -> tuple[float, float]:
    """(start, end) of the longest gap between answers from the kill on, in seconds after the kill (`times` sorted)."""
    points = [killed_at, *(t for t in times if t >= killed_at)]
    best = (0.0, 0.0)
    for before, after in itertools.pairwise(points):
        if after - before > best[1] - best[0]:
            best = (before - killed_at, after - killed_at)
    return best


def recovered_at(times: list[float], killed_at: float, until: float, steady: float) -> float | None:
    """Seconds from the kill to the first answer (before `until`, and not before the longest silence after the kill
    is over: the answers of batches already under way when the server died are not a recovery) from which the next
    `WINDOW` seconds hold at least half the answers per second of the `WINDOW` seconds before the kill (the allocator
    answers in batches of 32: a single second may hold none, so one second is not a rate); None if that never
    happens. The window counts answers past `until` too: a backlog worked off in less than `WINDOW` seconds after a
    long election is a recovery, not a failure to recover. Later slow seconds are the machine's, not the failover's:
    they show in `per_second_after`. `times` is sorted."""
    after = [moment for moment in times if moment >= killed_at]
    silence_over = killed_at + longest_silence([t for t in after if t < until], killed_at)[1]
    for index, start in enumerate(after):
        if start >= until:
            break
        if start < silence_over:
            continue
        if bisect.bisect_left(after, start + WINDOW) - index >= steady * WINDOW / 2:
            return start - killed_at
    return None


async def deploy_through_a_failover(
    stack: ClusterStack, total: int = TOTAL, rate: float = RATE, kill_after: int = KILL_AFTER
) -> dict[str, Any]:
    """Send `total` deploys at `rate`/s, kill the ERU_DEPLOY leader after `kill_after` answers, wait for every
    answer; the figures, with `answers` (request id → every reply) and `request_ids` for the checks."""
    info = stack.info()
    urls = split_urls(info.nats_url)
    watcher = await connect(info.nats_url, name="cluster-watch")
    placement = (await watcher.jetstream().stream_info("ERU_DEPLOY")).cluster
    if placement is None or placement.leader is None:
        raise RuntimeError("ERU_DEPLOY has no leader: is this a cluster?")
    leader = placement.leader
    await watcher.close()
    victim = str(leader)
    victim_pid = info.server_pids[victim]
    # the client lists all three, starting with a survivor: its replies keep coming while the victim dies
    index = int(victim.rsplit("-", 1)[1]) - 1
    ordered = urls[index + 1 :] + urls[:index]
    nc = await connect(",".join([*ordered, urls[index]]), name="cluster-client", dont_randomize=True)
    client = Client(nc, nc.new_inbox(), total=total, kill_after=kill_after)
    await nc.subscribe(f"{client.inbox}.*", cb=client.on_reply)
    await nc.flush()
    started = time.monotonic()
    killed: list[float] = []

    async def kill_when_due() -> None:
        # after `kill_after` answers, whether the client is still sending or the stack is still working through
        # what it was sent (under load the answers lag the sending by many seconds): mid-burst either way
        await client.kill_point.wait()
        os.kill(victim_pid, signal.SIGKILL)  # the server that leads the deploy stream
        killed.append(time.monotonic())

    killer = asyncio.create_task(kill_when_due())
    tasks = []
    for sent in range(total):
        tasks.append(asyncio.create_task(client.send()))
        await asyncio.sleep(max(0.0, started + (sent + 1) / rate - time.monotonic()))
    await asyncio.gather(*tasks)
    sent_done = time.monotonic()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(client.all_answered.wait(), timeout=180)
    await asyncio.sleep(1.0)  # a late second answer to the same request would show here
    await client.close()
    killer.cancel()
    if not killed:
        raise RuntimeError(f"only {len(client.answers)} answers: the kill point ({kill_after}) was never reached")
    killed_at = killed[0]
    times = sorted(client.answered_at.values())
    before = per_second(times, killed_at - WINDOW, killed_at)
    # after the kill, while work is still outstanding (until 95 % of the answers are in: then the load tails off)
    loaded_until = times[int(len(times) * 0.95)] if times else killed_at
    after = per_second(times, killed_at, loaded_until)
    steady = statistics.mean(before) if before else 0.0
    back = recovered_at(times, killed_at, loaded_until, steady)
    return {
        "victim": victim,
        "client_server": ordered[0].rsplit("@", 1)[-1],
        "sent": total,
        "stored": len(client.stored),
        "publish_retries": client.publish_retries,
        "asked_again": client.asked_again,
        "answered": len(client.answers),
        "answers": client.answers,
        "accepted": sum(1 for a in client.answers.values() if a and a[0].get("status") == "accepted"),
        "answered_twice": sum(1 for a in client.answers.values() if len(a) > 1),
        "per_second_before": before,
        "per_second_after": after,
        "steady_per_second": steady,
        "recovered_after_seconds": None if back is None else round(back, 1),
        "send_seconds": round(sent_done - started, 1),
        "killed_after_seconds": round(killed_at - started, 1),
        "first_answer_after_seconds": round(times[0] - started, 1) if times else None,
        "request_ids": sorted(client.stored),
    }


async def ledger(dsn: str, request_ids: list[str]) -> dict[str, Any]:
    """What the ledger holds for these requests: deploys, containers per deploy, settled rows, usage problems."""
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        deploys = await pool.fetch(
            "SELECT d.request_id, d.status, (SELECT count(*) FROM containers c WHERE c.deploy_id = d.id) AS n "
            "FROM deploys d WHERE d.request_id = ANY($1::text[])",
            request_ids,
        )
        settled = await pool.fetch(
            "SELECT request_id, outcome FROM settled_requests WHERE request_id = ANY($1::text[])", request_ids
        )
        return {
            "deploys": len(deploys),
            "deploys_per_request": Counter(Counter(row["request_id"] for row in deploys).values()),
            "containers_per_deploy": Counter(int(row["n"]) for row in deploys),
            "statuses": Counter(str(row["status"]) for row in deploys),
            "settled": Counter(str(row["outcome"]) for row in settled),
            "usage_problems": await usage_problems(pool),
        }
    finally:
        await pool.close()
