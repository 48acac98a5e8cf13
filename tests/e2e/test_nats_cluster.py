"""`eru up --nats-cluster 3` for real (docs/deploy.md "The NATS cluster"): three nats-servers with R3 streams and the
per-role users, every one advertising loopback only; `eru status` shows them; a client deploys 1,000 containers on
simulated nodes while the server leading ERU_DEPLOY is killed -9, and every request is answered once, none lost or
placed twice, the allocation invariant holds and throughput is back within 10 s; `eru down` stops all three.

Marked `cluster` (and `slow`): `pytest -m "not cluster"` skips them locally; CI runs everything."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from cluster_stack import ClusterStack, eru, raw_info
from pipeline_processes import usage_problems

from eru.bus import connect, new_envelope
from eru.bus.codec import decode_value, encode
from eru.bus.connection import split_urls
from eru.bus.consumer import H_REPLY_TO
from eru.bus.publish import message_headers
from eru.bus.subjects import DEPLOY_REQUEST
from eru.domain import DeployRequest
from eru.stack.info import pid_alive
from eru.stack.stop import port_free
from eru.testing.nats_server import non_loopback_addresses

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(420)]

TOTAL = 1000
RATE = 50.0  # requests per second the client sends (a steady stream the stack keeps up with)
KILL_AFTER = 300  # answers received before the kill: mid-burst, with a measured rate before it
RECOVERY_SECONDS = 10.0
WINDOW = 3.0  # seconds over which the rate after the kill is compared with the rate before it


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterStack]:
    cluster = ClusterStack(tmp_path_factory.mktemp("cluster") / "state", sim_nodes=8)
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.force_cleanup()


def test_three_servers_with_r3_streams_each_advertising_loopback_only(stack: ClusterStack) -> None:
    info = stack.info()
    servers = sorted(name for name in info.server_pids if name.startswith("nats-"))
    assert servers == ["nats-1", "nats-2", "nats-3"]
    # the CLI's and every service's URL names all three (with the operator's / the service's own user)
    assert len(split_urls(info.nats_url)) == 3
    for pid in info.processes.values():
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        url = next(item for item in environ if item.startswith(b"ERU_BUS__URL=")).decode().split("=", 1)[1]
        assert len(split_urls(url)) == 3
    expected = {f"127.0.0.1:{stack.nats_port + offset}" for offset in range(3)}
    for offset in range(3):
        greeting = raw_info(stack.nats_port + offset)
        assert non_loopback_addresses(greeting) == [], greeting
        assert set(greeting["connect_urls"]) == expected, greeting
        assert greeting["auth_required"] is True  # the same per-role users as a single server
    status = stack.status()
    nats = status["nats"]
    assert nats["state"] == "up", nats
    assert [server["state"] for server in nats["servers"]] == ["up", "up", "up"]
    assert {row["stream"]: row["replicas"] for row in nats["streams"]} == dict.fromkeys(
        ("ERU_DEPLOY", "ERU_NODE", "ERU_EVENTS", "ERU_METRICS", "ERU_DLQ"), 3
    )
    assert all(row["leader"] in servers for row in nats["streams"]), nats["streams"]
    text = eru("status", "--state-dir", str(stack.state_dir), timeout=60).stdout
    assert "ERU_DEPLOY R3 leader nats-" in text


@dataclass
class Client:
    """A client sending deploy requests on one connection (to all three servers) and timing the answers."""

    nc: Any
    inbox: str
    answers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    answered_at: dict[str, float] = field(default_factory=dict)
    stored: set[str] = field(default_factory=set)
    publish_retries: int = 0
    all_answered: asyncio.Event = field(default_factory=asyncio.Event)

    async def on_reply(self, msg: Any) -> None:
        request_id = msg.subject.rsplit(".", 1)[-1]
        value = decode_value(msg.data, (msg.headers or {}).get("Content-Type"))
        self.answers.setdefault(request_id, []).append(value if isinstance(value, dict) else {})
        self.answered_at.setdefault(request_id, time.monotonic())
        if len(self.answers) >= TOTAL:
            self.all_answered.set()

    async def send(self) -> None:
        """One single-container deploy, stored on the bus: a publish that times out (its server died) is sent
        again with the same id, which JetStream de-duplicates — what any client does."""
        request_id = f"cluster-{uuid.uuid4().hex}"
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
        deadline = time.monotonic() + 60
        while True:
            try:
                await self.nc.jetstream().publish(DEPLOY_REQUEST, encode(request), headers=headers, timeout=2.0)
                self.stored.add(request_id)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                self.publish_retries += 1
                await asyncio.sleep(0.2)


def per_second(times: list[float], start: float, end: float) -> list[int]:
    """Answers in each whole second from `start` to `end` (a last partial second is left out)."""
    buckets = [0] * max(0, int(end - start))
    for moment in times:
        if start <= moment < start + len(buckets):
            buckets[int(moment - start)] += 1
    return buckets


def recovered_at(times: list[float], killed_at: float, until: float, steady: float) -> float | None:
    """Seconds from the kill to the first answer from which answers keep flowing at half the rate before the kill
    or more, over every 3-second window up to `until` (the allocator answers in batches: one second may hold
    none); None if they never do."""
    after = [moment for moment in times if killed_at <= moment < until]
    for start in after:
        windows = [start + offset for offset in range(max(1, int(until - start - WINDOW) + 1))]
        if all(sum(1 for t in after if w <= t < w + WINDOW) >= steady * WINDOW / 2 for w in windows):
            return start - killed_at
    return None


async def deploy_through_a_failover(stack: ClusterStack) -> dict[str, Any]:
    info = stack.info()
    urls = split_urls(info.nats_url)
    watcher = await connect(info.nats_url, name="cluster-watch")
    leader = (await watcher.jetstream().stream_info("ERU_DEPLOY")).cluster.leader
    await watcher.close()
    victim = str(leader)
    victim_pid = info.server_pids[victim]
    # the client lists all three, starting with a survivor: its replies keep coming while the victim dies
    index = int(victim.rsplit("-", 1)[1]) - 1
    ordered = urls[index + 1 :] + urls[:index]
    nc = await connect(",".join([*ordered, urls[index]]), name="cluster-client", dont_randomize=True)
    client = Client(nc, nc.new_inbox())
    await nc.subscribe(f"{client.inbox}.*", cb=client.on_reply)
    await nc.flush()
    started = time.monotonic()
    killed_at: float | None = None
    tasks = []
    for sent in range(TOTAL):
        tasks.append(asyncio.create_task(client.send()))
        if killed_at is None and len(client.answers) >= KILL_AFTER:
            os.kill(victim_pid, signal.SIGKILL)  # mid-burst, the server that leads the deploy stream
            killed_at = time.monotonic()
        await asyncio.sleep(max(0.0, started + (sent + 1) / RATE - time.monotonic()))
    await asyncio.gather(*tasks)
    sent_done = time.monotonic()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(client.all_answered.wait(), timeout=120)
    await asyncio.sleep(1.0)  # a late second answer to the same request would show here
    await nc.close()
    assert killed_at is not None, f"only {len(client.answers)} answers before the burst ended"
    times = sorted(client.answered_at.values())
    before = per_second(times, killed_at - 5, killed_at)
    # after the kill, while work is still outstanding (until 95 % of the answers are in: then the load tails off)
    loaded_until = times[int(len(times) * 0.95)] if times else killed_at
    after = per_second(times, killed_at, loaded_until)
    steady = statistics.mean(before) if before else 0.0
    back = recovered_at(times, killed_at, loaded_until, steady)
    return {
        "victim": victim,
        "client_server": ordered[0].rsplit("@", 1)[-1],
        "sent": TOTAL,
        "stored": len(client.stored),
        "publish_retries": client.publish_retries,
        "answered": len(client.answers),
        "answers": client.answers,
        "accepted": sum(1 for a in client.answers.values() if a and a[0].get("status") == "accepted"),
        "answered_twice": sum(1 for a in client.answers.values() if len(a) > 1),
        "per_second_before": before,
        "per_second_after": after,
        "steady_per_second": steady,
        "recovered_after_seconds": None if back is None else round(back, 1),
        "send_seconds": round(sent_done - started, 1),
        "request_ids": sorted(client.stored),
    }


async def ledger(dsn: str, request_ids: list[str]) -> dict[str, Any]:
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


def test_a_killed_nats_server_loses_nothing_and_throughput_recovers(stack: ClusterStack) -> None:
    figures = asyncio.run(deploy_through_a_failover(stack))
    answers = figures.pop("answers")
    request_ids = figures.pop("request_ids")
    found = asyncio.run(ledger(stack.info().database_dsn, request_ids))
    shown = json.dumps({**figures, **{k: dict(v) if isinstance(v, Counter) else v for k, v in found.items()}})
    print(f"\nfailover figures: {shown}")
    # every request stored once and answered: accepted, none unanswered
    assert figures["stored"] == TOTAL, shown
    assert figures["answered"] == TOTAL, shown
    errors = [a[0] for a in answers.values() if a[0].get("status") != "accepted"]
    assert errors == [], errors[:3]
    # none lost or doubled: one deploy of one container per request, each settled once (settled_requests)
    assert found["deploys"] == TOTAL, shown
    assert found["deploys_per_request"] == Counter({1: TOTAL}), shown
    assert found["containers_per_deploy"] == Counter({1: TOTAL}), shown
    assert found["settled"] == Counter({"accepted": TOTAL}), shown
    assert found["usage_problems"] == [], shown
    # a request delivered again after the failover (its ack died with the server) is answered again, with the same
    # deploy: settled_requests made the second delivery do nothing
    for replies in answers.values():
        assert len({reply.get("deploy_id") for reply in replies}) == 1, replies
    # throughput back within 10 s of the kill: answers at half the rate before it or more, for good
    recovered = figures["recovered_after_seconds"]
    assert recovered is not None, shown
    assert recovered <= RECOVERY_SECONDS, shown
    # the supervisor starts the killed server again and it catches up: three servers, every stream R3, current
    stack.wait(lambda: _cluster_whole(stack.status()), 60, "the killed server to rejoin and catch up")


def _cluster_whole(status: dict[str, Any]) -> bool:
    nats = status["nats"]
    servers_up = [server["state"] for server in nats.get("servers", [])] == ["up", "up", "up"]
    streams = nats.get("streams", [])
    current = all(
        row.get("replicas") == 3 and all(f["current"] and not f["offline"] for f in row.get("followers", []))
        for row in streams
    )
    return servers_up and len(streams) == 5 and current


def test_eru_down_stops_all_three(stack: ClusterStack) -> None:
    info = stack.info()
    pids = {**info.server_pids, **info.processes}
    done = stack.down()
    assert done.returncode == 0, done.stdout + done.stderr
    assert [name for name, pid in pids.items() if pid_alive(pid)] == []
    taken = {name: port for name, port in info.ports.items() if not port_free(port)}
    assert taken == {}, f"still taken after eru down: {taken}"
