"""Allocator replicas split the deploy work by pod (docs/replicas.md), as processes against real NATS + PostgreSQL:
each pod is planned by the replica leasing its partition, and when one replica is killed with SIGKILL mid-burst its
partitions are taken over within 10 s and every request is answered, none lost or doubled."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import msgpack
import pytest
import pytest_asyncio
from nats.js.errors import BucketNotFoundError
from pipeline_processes import TERMINAL, Processes, usage_problems

from eru.bus import new_envelope
from eru.bus import request as ask
from eru.bus.codec import decode, encode
from eru.bus.kv_keys import live_entries
from eru.bus.leases import partition_of
from eru.bus.replies import H_REPLY_TO
from eru.bus.subjects import DEPLOY_REQUEST, allocator_operation, tenant_deploy_request
from eru.domain import DeployEvent, DeployRequest
from eru.domain.messages import OperationReply
from eru.domain.tenants import TenantCreateRequest
from eru.store import create_pool
from eru.testing.pytest_postgres import postgres_dsn, postgres_server, postgres_template
from eru_allocator.intake.routing import LEASE_BUCKET

__all__ = ["postgres_dsn", "postgres_server", "postgres_template"]

PARTITIONS = 8
REPLICAS = ("alloc-a", "alloc-b", "alloc-c")


@pytest.fixture
def processes(nats_url: str, postgres_dsn: str, tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(nats_url, postgres_dsn, tmp_path / "logs")
    # the defaults of a real stack: the deploy requests a killed replica held come back by deploy_ack_wait_seconds
    procs.env["ERU_ALLOCATOR__ACK_WAIT_SECONDS"] = "30"
    procs.env["ERU_ALLOCATOR__PARTITIONS"] = str(PARTITIONS)
    try:
        yield procs
    finally:
        procs.stop_all()


@pytest_asyncio.fixture
async def pool(postgres_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(postgres_dsn, min_size=1, max_size=4)
    try:
        yield pool
    finally:
        await pool.close()


async def owners(js: Any) -> dict[int, str]:
    """Partition → the replica leasing it now (listed by the server: `kv.keys()` can end early, nats.py#842)."""
    try:
        kv = await js.key_value(LEASE_BUCKET)
    except BucketNotFoundError:
        return {}
    entries = await live_entries(js, kv, LEASE_BUCKET, "p.")
    return {int(key[2:]): entry.value.decode() for key, entry in entries.items()}


async def until(condition: Any, within: float, what: str, processes: Processes) -> None:
    try:
        async with asyncio.timeout(within):
            while not await condition():  # noqa: ASYNC110 - polling other processes' state
                await asyncio.sleep(0.1)
    except TimeoutError:
        pytest.fail(f"{what} not within {within}s; logs:\n{processes.logs()}")


def pods_one_per_replica(by_partition: dict[int, str]) -> dict[str, str]:
    """A pod name for every replica, hashing into a partition it leases."""
    chosen: dict[str, str] = {}
    index = 0
    while len(chosen) < len(REPLICAS):
        name = f"pod{index}"
        chosen.setdefault(by_partition[partition_of(name, PARTITIONS)], name)
        index += 1
    return chosen


@pytest.mark.slow
async def test_replicas_split_pods_and_take_over_a_killed_ones_share(
    processes: Processes, pool: asyncpg.Pool, js: Any
) -> None:
    processes.start("distributor", "eru_distributor")
    for name in REPLICAS:
        processes.start(name, "eru_allocator")

    async def spread() -> bool:
        held = Counter((await owners(js)).values())
        return sum(held.values()) == PARTITIONS and set(held) == set(REPLICAS) and max(held.values()) <= 3

    await until(spread, 60, "8 partitions over 3 replicas", processes)
    pod_of_replica = pods_one_per_replica(await owners(js))
    pods = sorted(pod_of_replica.values())
    for pod in pods:
        processes.start(
            f"agent-{pod}",
            "eru_node_agent",
            ERU_NODE_AGENT__RUNTIME="sim",
            ERU_NODE_AGENT__NODE=pod,
            ERU_NODE_AGENT__POD=pod,
            ERU_NODE_AGENT__SIM_NODES="3",
            ERU_NODE_AGENT__CPU_CORES="16",
            ERU_NODE_AGENT__MEMORY=str(64 * 1024**3),
            ERU_NODE_AGENT__HEARTBEAT_INTERVAL_SECONDS="2",
            ERU_NODE_AGENT__METRICS_INTERVAL_SECONDS="30",
        )

    async def registered() -> bool:
        return bool(await pool.fetchval("SELECT count(*) FROM nodes") == 3 * len(pods))

    await until(registered, 60, "9 sim nodes", processes)
    await ask(js._nc, allocator_operation("tenant-create"), TenantCreateRequest(name="acme"), OperationReply, 10)

    total = 180
    requests = [
        DeployRequest.model_validate(
            {
                "request_id": f"part-{i}",
                "pod": pods[i % len(pods)],
                "count": 1 + i % 2,
                "workload": {
                    "name": f"w{i % 4}",
                    "image": "busybox",
                    "resources": {"cpu_bind": i % 2 == 0, "cpu_request": 0.1, "memory_request": "32MiB"},
                },
            }
        )
        for i in range(total)
    ]
    answers: dict[int, list[dict[str, Any]]] = {}

    async def on_reply(msg: Any) -> None:
        answers.setdefault(int(msg.subject.rsplit(".", 1)[-1]), []).append(msgpack.unpackb(msg.data))

    async def some_answered() -> bool:
        return len(answers) >= 20

    inbox = await js._nc.subscribe("_INBOX.partitions.*", cb=on_reply)
    victim = REPLICAS[1]
    victim_partitions = {p for p, owner in (await owners(js)).items() if owner == victim}
    killed_at = 0.0
    for index, request in enumerate(requests):
        # every fourth request through a tenant's subject: routed with its origin, scoped to that tenant
        subject = tenant_deploy_request("acme") if index % 4 == 3 else DEPLOY_REQUEST
        envelope = new_envelope("eru.deploy.request", "test-client")
        headers = {**envelope.to_headers(), H_REPLY_TO: f"_INBOX.partitions.{index}"}
        await js.publish(subject, encode(request), headers=headers)
        if index == 60:
            await until(some_answered, 60, "the first answers", processes)
            processes.kill9(victim)  # mid-burst, with requests of its pod in flight and more to come
            killed_at = time.monotonic()

    async def taken_over() -> bool:
        now = await owners(js)
        return all(now.get(p) not in (None, victim) for p in victim_partitions)

    await until(taken_over, 15, "the killed replica's partitions taken over", processes)
    takeover_seconds = time.monotonic() - killed_at
    assert takeover_seconds < 10, f"takeover took {takeover_seconds:.1f}s"
    print(f"partitions {sorted(victim_partitions)} of {victim} taken over in {takeover_seconds:.1f}s")

    async def all_answered() -> bool:
        return len(answers) == total

    await until(all_answered, 90, f"answers to all {total} requests", processes)
    await inbox.unsubscribe()
    for index, replies in answers.items():
        assert {reply.get("deploy_id") for reply in replies} != {None}, f"request {index}: {replies}"
        assert len({reply.get("deploy_id") for reply in replies}) == 1, f"request {index} answered differently"
        assert all(reply.get("status") != "error" for reply in replies), f"request {index}: {replies}"

    finished = "SELECT count(*) FROM deploys WHERE status IN ('completed', 'partial', 'failed')"

    async def all_finished() -> bool:
        return bool(await pool.fetchval(finished) == total)

    await until(all_finished, 60, "every deploy finished", processes)
    rows = await pool.fetch(
        "SELECT d.request_id, d.pod, d.tenant, count(c.id) AS n FROM deploys d "
        "LEFT JOIN containers c ON c.deploy_id = d.id GROUP BY d.request_id, d.pod, d.tenant"
    )
    expected = {(f"acme/{r.request_id}" if i % 4 == 3 else r.request_id): r.count for i, r in enumerate(requests)}
    assert {row["request_id"]: row["n"] for row in rows} == expected  # none lost, none doubled
    assert {row["tenant"] for row in rows if row["request_id"].startswith("acme/")} == {"acme"}
    assert await usage_problems(pool) == []
    routed = await js.stream_info("ERU_PARTITIONS")
    assert routed.state.last_seq > 0  # requests reached replicas not leasing their pod, and were routed
    assert routed.state.messages == 0  # and every routed one was done

    events = await _stored_deploy_events(js)
    terminal = Counter(e.deploy_id for _, e in events if e.kind in TERMINAL)
    assert len(terminal) == total
    assert set(terminal.values()) == {1}
    planned_by = Counter(source for source, e in events if e.kind == "planned")
    survivors = {f"allocator/{name}" for name in REPLICAS if name != victim}
    victim_pod = pod_of_replica[victim]
    late = {e.deploy_id for source, e in events if e.kind == "planned" and source in survivors}
    assert late, planned_by
    # the killed replica's pod was planned by a survivor after the kill
    late_pods = await pool.fetch("SELECT DISTINCT pod FROM deploys WHERE id = ANY($1::text[])", list(late))
    assert victim_pod in {row["pod"] for row in late_pods}


async def _stored_deploy_events(js: Any) -> list[tuple[str, DeployEvent]]:
    subscription = await js.subscribe("eru.deploy.*.*", ordered_consumer=True)
    events = []
    try:
        while True:
            msg = await subscription.next_msg(timeout=10)
            events.append((msg.headers["ce-source"], decode(msg.data, DeployEvent)))
            if msg.metadata.num_pending == 0:
                return events
    finally:
        await subscription.unsubscribe()
