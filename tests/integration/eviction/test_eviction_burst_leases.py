"""A burst of samples longer than a lease TTL: the replica keeps renewing its leases while it works through it.

The samples and the lease traffic share the replica's NATS connection and its event loop. A handler that never
yields holds the loop for the whole backlog, and the lease answers wait behind the samples on the socket: the
leases expire and the other replica takes the busy one's nodes in the middle of the burst (issue 41).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from eviction_helpers import GIB, start_replica

from eru.bus.codec import encode_value, to_wire
from eru.bus.envelope import H_CONTENT_TYPE, new_envelope
from eru.bus.leases import partition_of
from eru.domain import ContainerMetrics, NodeMetrics
from eru_eviction.partitions import BUCKET

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 8
LEASES: dict[str, Any] = {"partitions": PARTITIONS, "lease_ttl_seconds": 2.0}
CONTAINERS = 50
ROUNDS = 4
NODES = 1000  # of the busy replica: ROUNDS x NODES samples of 50 containers, several TTLs of work for one replica


async def wait_until(check: Any, within: float = 30.0, state: Any = None) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"timed out ({state() if state else ''})"
        await asyncio.sleep(0.05)


def calm(node: str, at: float) -> NodeMetrics:
    """A 64-core node of 50 containers, far below every watermark (the samples decide nothing)."""
    containers = [
        ContainerMetrics(
            container_id=f"c{index}",
            priority_class="prod" if index < 10 else "batch",
            priority=index,
            tenant="t",
            cpu_used=0.2,
            memory_used=GIB // 4,
            cpu_request=0.5,
            memory_request=GIB // 2,
        )
        for index in range(CONTAINERS)
    ]
    return NodeMetrics(
        node=node,
        time=at,
        cpu_capacity=64,
        cpu_used=10.0,
        memory_used=13 * GIB,
        memory_total=128 * GIB,
        containers=containers,
    )


async def test_a_burst_longer_than_the_lease_ttl_moves_no_partition(nats_url: str, nc: Any, js: Any) -> None:
    busy = await start_replica(nats_url, "r1", **LEASES)
    idle = await start_replica(nats_url, "r2", **LEASES)
    try:
        await wait_until(lambda: busy.ctx.load.get("partitions") == idle.ctx.load.get("partitions") == 4.0)
        kv = await js.key_value(BUCKET)
        owners = {p: (await kv.get(f"p.{p}")).value for p in range(PARTITIONS)}
        mine = {p for p, owner in owners.items() if owner == b"r1"}
        assert len(mine) == 4, owners

        # Every lease write from now on (a renewal, a take-over), as the server stores it.
        writes: list[tuple[int, bytes]] = []

        async def on_lease(msg: Any) -> None:
            writes.append((int(msg.subject.rpartition(".")[2]), msg.data))

        await nc.subscribe(f"$KV.{BUCKET}.p.*", cb=on_lease)
        await nc.flush()

        nodes: list[str] = []
        index = 0
        while len(nodes) < NODES:
            if partition_of(f"n{index}", PARTITIONS) in mine:
                nodes.append(f"n{index}")
            index += 1
        headers = {**new_envelope("eru.metrics", "burst").to_headers(), H_CONTENT_TYPE: "application/msgpack"}
        headers.pop("Nats-Msg-Id")
        # Encoded from one plain value (encoding thousands of models here would hold the loop for seconds itself).
        wire = to_wire(calm("n", 0.0))
        now = time.time()
        bodies = [
            (f"eru.metrics.{node}", encode_value({**wire, "node": node, "time": now - ROUNDS + r}))
            for r in range(ROUNDS)
            for node in nodes
        ]
        replicas = (busy, idle)

        def handled() -> float:
            return sum(r.ctx.load.get("samples", 0.0) for r in replicas)

        before = handled()
        for subject, body in bodies:
            await nc.publish(subject, body, headers=headers)
        await nc.flush()

        # Every sample handled (as the replicas' load reports say), then one more renewal of each lease.
        await wait_until(lambda: handled() - before >= len(bodies), 90, lambda: [r.ctx.load for r in replicas])
        renewed_after = len(writes)
        await wait_until(lambda: {p for p, _ in writes[renewed_after:]} >= set(owners))

        moved = [(p, owner) for p, owner in writes if owner != owners[p]]
        assert moved == [], f"leases changed hands during the burst: {moved}"
    finally:
        await idle.stop()
        await busy.stop()
