"""The compose stack, for real (docs/deploy.md "The compose stack"): `make image` (rebuilt only when the sources
changed), `make compose-up` with its generated secrets, a client deploying 1,000 containers while one NATS server
(the deploy stream's leader) and the allocator replica leasing the pod's partition are `docker kill`ed, then
`make compose-down` leaving no container, network or volume of the project behind.

Marked `compose` (and `docker`): `pytest -m "not compose"` skips it on a developer's machine; CI runs it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from bench.faults.checks import invariant_violations, unsettled

from eru.bus import connect, new_envelope
from eru.bus.codec import decode_value, encode
from eru.bus.connection import split_urls
from eru.bus.consumer import H_REPLY_TO
from eru.bus.publish import message_headers
from eru.bus.streams import DEPLOY
from eru.compose.topology import DEFAULT_TENANT, NATS_SERVERS, SIM_AGENTS, replica_names
from eru.domain import DeployRequest
from eru.testing.asking import Progress, ask_until_answered, store
from eru.testing.compose_stack import ComposeStack, ImageUnavailable, ensure_image

pytestmark = [pytest.mark.compose, pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1800)]

REQUESTS = 1000  # one container each: 1,000 containers
SEND_SECONDS = 16.0
KILL_AFTER = SEND_SECONDS / 3
RECOVER_WITHIN = 10.0  # the target the printed figure is compared with (docs/deploy.md)
SUBJECT = f"eru.t.{DEFAULT_TENANT}.deploy.request"


@dataclass
class Sent:
    """One request as the client saw it."""

    request_id: str
    stored_at: float | None = None
    replied_at: float | None = None
    reply: dict[str, Any] | None = None
    publish_failures: int = 0
    asked_again: int = 0
    answered: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class Client:
    """A tenant's client: publishes each deploy onto the stream (retrying a publish the bus did not acknowledge with
    the same message id, as a real client would: the stream keeps it once), listens for the answers and asks again
    with the same request id for one that does not come (lost while the client reconnected: `eru.testing.asking`,
    docs/deploy.md "Clients: ask again with the same request id")."""

    nc: Any
    inbox: str
    sent: dict[str, Sent] = field(default_factory=dict)
    askers: set[asyncio.Task[None]] = field(default_factory=set)
    progress: Progress = field(default_factory=Progress)
    replies: int = 0
    all_answered: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    async def open(cls, url: str) -> Client:
        nc = await connect(url, name="compose-client", connect_timeout=10, dont_randomize=True)
        client = cls(nc, nc.new_inbox())
        await nc.subscribe(f"{client.inbox}.*", cb=client._on_reply)
        await nc.flush()
        return client

    async def _on_reply(self, msg: Any) -> None:
        entry = self.sent.get(msg.subject.rsplit(".", 1)[-1])
        if entry is None or entry.reply is not None:
            return
        value = decode_value(msg.data, (msg.headers or {}).get("Content-Type"))
        entry.reply = value if isinstance(value, dict) else {"status": "unreadable"}
        entry.replied_at = time.monotonic()
        self.progress.answered(entry.stored_at)
        entry.answered.set()
        self.replies += 1
        if self.replies == REQUESTS:
            self.all_answered.set()

    async def send(self) -> None:
        request_id = uuid.uuid4().hex
        entry = self.sent[request_id] = Sent(request_id)
        request = DeployRequest.model_validate(
            {
                "request_id": request_id,
                "pod": "default",
                "count": 1,
                "workload": {
                    "name": "compose-failover",
                    "image": "busybox",
                    "resources": {"cpu_request": 0.01, "memory_request": "1MiB"},
                },
            }
        )
        envelope = new_envelope("eru.deploy.request", "compose-client", message_id=request_id)
        headers = {**message_headers(envelope), H_REPLY_TO: f"{self.inbox}.{request_id}"}
        body, js = encode(request), self.nc.jetstream()
        with contextlib.suppress(Exception):  # not stored within the minute: shows as unanswered
            entry.publish_failures += await store(js, SUBJECT, body, headers, time.monotonic() + 60.0)
            entry.stored_at = time.monotonic()
            task = asyncio.create_task(self._ask_until_answered(entry, js, body, headers))
            self.askers.add(task)
            task.add_done_callback(self.askers.discard)

    async def _ask_until_answered(self, entry: Sent, js: Any, body: bytes, headers: dict[str, str]) -> None:
        until = time.monotonic() + 150.0
        entry.asked_again = await ask_until_answered(
            js, SUBJECT, body, headers, entry.answered, until=until, progress=self.progress
        )

    async def close(self) -> None:
        """Stop asking again and close the connection."""
        for task in list(self.askers):
            task.cancel()
        await asyncio.gather(*self.askers, return_exceptions=True)
        await self.nc.close()

    async def burst(self, total: int, seconds: float) -> None:
        gap = seconds / total
        tasks = []
        for _ in range(total):
            tasks.append(asyncio.create_task(self.send()))
            await asyncio.sleep(gap)
        await asyncio.gather(*tasks)

    async def answered(self, within: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.all_answered.wait(), within)


def recovery_seconds(replies: list[float], killed_at: float, sent_until: float) -> float | None:
    """Seconds from the kill until answers flow again at half the rate of the 3 s before it (a 1 s window), or
    until nothing sent is left unanswered; None when neither happens."""
    before = sum(1 for t in replies if killed_at - 3.0 <= t < killed_at) / 3.0
    after = sorted(t for t in replies if t >= killed_at)
    for index, start in enumerate(after):
        in_window = sum(1 for t in after[index:] if t < start + 1.0)
        if in_window >= max(1.0, before / 2):
            return start + 1.0 - killed_at
    if after and after[-1] >= sent_until:
        return after[-1] - killed_at
    return None


LEDGER_SQL = """
SELECT d.request_id, d.status, left(d.result::text, 300) AS result,
       (SELECT count(*) FROM containers c WHERE c.deploy_id = d.id AND c.replaces IS NULL) AS containers,
       (SELECT string_agg(c.node || ':' || c.state || ':' || coalesce(c.reason, ''), ',')
          FROM containers c WHERE c.deploy_id = d.id) AS states
  FROM deploys d WHERE d.request_id = ANY($1::text[])
"""


async def ledger(dsn: str, request_ids: list[str], within: float) -> dict[str, Any]:
    """Each request's deploy once all are finished (or `within` passed): tenant request ids are kept as
    `<tenant>/<id>` (docs/security.md)."""
    keys = [f"{DEFAULT_TENANT}/{rid}" for rid in request_ids]
    deadline = time.monotonic() + within
    while True:
        conn = await asyncpg.connect(dsn, timeout=10)
        try:
            rows = {row["request_id"]: row for row in await conn.fetch(LEDGER_SQL, keys)}
        finally:
            await conn.close()
        finished = [r for r in rows.values() if r["status"] in ("completed", "partial", "failed")]
        if len(finished) == len(keys) or time.monotonic() > deadline:
            return rows
        await asyncio.sleep(1.0)


async def deploy_stream_leader(url: str) -> str:
    nc = await connect(url, name="compose-check", connect_timeout=10)
    try:
        info = await nc.jetstream().stream_info(DEPLOY)
        assert info.config.num_replicas == 3, f"{DEPLOY} has {info.config.num_replicas} replicas, expected 3"
        assert info.cluster is not None, "the deploy stream is not clustered"
        assert info.cluster.leader, "no leader for the deploy stream"
        return str(info.cluster.leader)
    finally:
        await nc.close()


async def pod_owner(url: str, pod: str = "default") -> str:
    """The allocator replica that leases `pod`'s partition (docs/replicas.md): the one whose death matters."""
    from eru.bus.leases import partition_of
    from eru.settings import AllocatorSettings
    from eru_allocator.intake.routing import LEASE_BUCKET

    key = f"p.{partition_of(pod, AllocatorSettings().partitions)}"
    nc = await connect(url, name="compose-check", connect_timeout=10)
    try:
        kv = await nc.jetstream().key_value(LEASE_BUCKET)
        deadline = time.monotonic() + 60.0
        while True:  # leases are taken within a tick or two of the replicas' start
            with contextlib.suppress(Exception):
                entry = await kv.get(key)
                if entry.value:
                    return entry.value.decode()
            assert time.monotonic() < deadline, f"nobody leases {key} of {LEASE_BUCKET}"
            await asyncio.sleep(0.5)
    finally:
        await nc.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeStack]:
    try:
        built = ensure_image()
    except ImageUnavailable as reason:
        print(f"\n*** {reason} ***", file=sys.stderr)
        pytest.skip(str(reason))
    stack = ComposeStack.create(Path(tmp_path_factory.mktemp("compose")))
    started = time.monotonic()
    try:
        stack.up()
        print(f"\ncompose: image build {built:.0f} s, compose-up {time.monotonic() - started:.0f} s")
        yield stack
    finally:
        with contextlib.suppress(AssertionError):
            stack.down()
        stack.force_remove()


def eru(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The `eru` CLI as a person runs it after `set -a; . .compose/env`, from a directory with no local stack."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "eru"), *args],
        env={**os.environ, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_cli_works_against_the_stack_as_operator_and_as_client(stack: ComposeStack, tmp_path: Path) -> None:
    env = stack.client_env()
    expected = {"allocator": 2, "distributor": 2, "eviction": 2, "node-agent": 3}
    deadline = time.monotonic() + 60.0
    while True:  # a replica busy on a loaded machine may miss one discovery round: ask again
        done = eru(env, tmp_path, "status", "-o", "json", "--timeout", "5")
        status = json.loads(done.stdout) if done.stdout.startswith("{") else {}
        replicas = {s["name"]: s["replicas"] for s in status.get("services", [])}
        if (done.returncode == 0 and replicas == expected) or time.monotonic() > deadline:
            break
    assert done.returncode == 0, done.stdout + done.stderr
    assert status["healthy"] is True
    assert status["postgres"]["state"] == "up"
    assert replicas == expected
    nodes = eru(env, tmp_path, "node", "ls", "-o", "json")
    assert nodes.returncode == 0, nodes.stderr
    names = sorted(node["name"] for node in json.loads(nodes.stdout)["nodes"])
    assert names == sorted(f"{agent}-{i:03d}" for agent in ("sim-a", "sim-b", "sim-c") for i in range(1, 5))
    as_client = {**env, "ERU_BUS_URL": env["ERU_CLIENT_URL"]}
    deployed = eru(
        as_client, tmp_path, "deploy", "--pod", "default", "--image", "busybox", "--count", "2", "--cpu", "0.1"
    )
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    denied = eru(as_client, tmp_path, "node", "cordon", "sim-a-001")
    assert denied.returncode == 1
    assert "permission denied" in denied.stdout + denied.stderr
    for secret in (env["ERU_BUS_URL"], env["ERU_CLIENT_URL"], env["ERU_DATABASE_URL"]):
        password = secret.split("@", 1)[0].rsplit(":", 1)[-1]
        assert password not in done.stdout + nodes.stdout + deployed.stdout + denied.stdout + denied.stderr


async def test_failover_under_a_burst_then_compose_down_leaves_nothing(stack: ComposeStack) -> None:
    env = stack.client_env()
    leader = await deploy_stream_leader(env["ERU_BUS_URL"])
    owner = await pod_owner(env["ERU_BUS_URL"])
    assert owner in ("allocator-1", "allocator-2"), owner
    # the client is connected to the server about to die: it reconnects mid-burst, and the answers sent meanwhile
    # are lost (at most once) — asked for again with the same request ids (docs/deploy.md "Clients: ask again …")
    urls = split_urls(env["ERU_CLIENT_URL"])
    victim = list(NATS_SERVERS).index(leader)  # the URLs list the servers in this order (eru.compose.secrets)
    client = await Client.open(",".join([urls[victim], *urls[:victim], *urls[victim + 1 :]]))
    burst = asyncio.create_task(client.burst(REQUESTS, SEND_SECONDS))
    await asyncio.sleep(KILL_AFTER)
    killed_at = time.monotonic()
    await asyncio.to_thread(stack.kill, leader)
    await asyncio.to_thread(stack.kill, owner)
    await burst
    sent_until = time.monotonic()
    await client.answered(within=120.0)
    replies = [e.replied_at for e in client.sent.values() if e.replied_at is not None]
    recovered = recovery_seconds(replies, killed_at, sent_until)
    rows = await ledger(env["ERU_DATABASE_URL"], list(client.sent), within=120.0)
    await client.close()

    unanswered = [e.request_id for e in client.sent.values() if e.reply is None]
    errors = [e.reply for e in client.sent.values() if e.reply is not None and e.reply.get("status") == "error"]
    missing = [rid for rid in client.sent if f"{DEFAULT_TENANT}/{rid}" not in rows]
    not_completed = [dict(r) for r in rows.values() if r["status"] != "completed"]
    doubled = [dict(r) for r in rows.values() if r["containers"] != 1]
    figures = {
        "leader_killed": leader,
        "allocator_killed": owner,
        "publish_retries": sum(e.publish_failures for e in client.sent.values()),
        "asked_again": sum(e.asked_again for e in client.sent.values()),
        "recovered_seconds": recovered,
        "recovered_within_target": recovered is not None and recovered <= RECOVER_WITHIN,
        "unanswered": len(unanswered),
        "errors": errors[:3],
        "missing": len(missing),
        "not_completed": not_completed[:3],
        "doubled": doubled[:3],
    }
    if not_completed or errors or unanswered:
        services = [*NATS_SERVERS, *replica_names(), *SIM_AGENTS]
        words = ("handler_error", "dead_lettered", "gave_up", "failed_permanently")
        figures["log"] = await asyncio.to_thread(stack.log_lines, services, words, 8)
    print(f"compose failover: {figures}")
    assert len(client.sent) == REQUESTS
    assert unanswered == [], figures
    assert errors == [], figures
    assert missing == [], figures
    assert not_completed == [], figures
    assert doubled == [], figures
    assert await invariant_violations(env["ERU_DATABASE_URL"]) == []
    # answers flow again at half the pre-kill rate; how fast (the 10 s target) is a figure, printed above and kept in
    # docs/deploy.md, not a timed assertion: 15.0 s in one quiet CI run when the killed server led the deploy
    # stream and the killed allocator owned the pod's partition (two elections and a lease expiry in a row)
    assert recovered is not None, figures
    assert await unsettled(env["ERU_BUS_URL"], quiet_seconds=60.0) == {}

    # `docker kill` is an operator's stop, which no restart policy undoes: start them again (as the host's init
    # would); a process that exits on its own is restarted by the policy (unless-stopped)
    for service in (leader, owner):
        await asyncio.to_thread(stack.start, service)
    before = await asyncio.to_thread(stack.exit_from_inside, "distributor-2")
    assert await asyncio.to_thread(stack.wait_restarted, "distributor-2", before, 60.0)
    assert await asyncio.to_thread(stack.wait_healthy, [leader, owner, "distributor-2"], 120.0) == {}

    await asyncio.to_thread(stack.down)
    assert stack.leftovers() == {"containers": [], "networks": [], "volumes": []}
