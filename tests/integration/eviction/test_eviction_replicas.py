"""Several eviction replicas split the nodes by partition lease; a crashed replica's nodes are taken over."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from typing import Any

import pytest
from eviction_helpers import GIB, Replica, collect, metrics, send, start_replica
from nats.js.errors import KeyNotFoundError

from eru_eviction.partitions import BUCKET

pytestmark = pytest.mark.timeout(60)

NODES = [f"node-{i}" for i in range(12)]
LEASES: dict[str, Any] = {"partitions": 8, "lease_ttl_seconds": 3.0}


async def wait_until(check: Any, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


def pressure(node: str) -> Any:
    """A sample over the memory evict watermark: answered at once by whichever replica owns the node."""
    return metrics(node, time.time(), node_cpu=8.0, batch={"b0": 0.5}, node_memory=50 * GIB, batch_memory=8 * GIB)


async def test_replicas_split_nodes_and_take_over_a_crashed_replica(nats_url: str, nc: Any, js: Any) -> None:
    found = await collect(nc)
    first = await start_replica(nats_url, "r1", **LEASES)
    second = await start_replica(nats_url, "r2", **LEASES)
    replicas: dict[str, Replica] = {"r1": first, "r2": second}
    try:
        # Within a couple of lease ticks the 8 partitions are shared 4 + 4.
        await wait_until(lambda: all(r.ctx.load.get("partitions") == 4.0 for r in replicas.values()))

        for node in NODES:
            await send(js, pressure(node))
        await found.wait_for(lambda f: {c.node for c in f.conditions} == set(NODES))
        owners: dict[str, set[str]] = defaultdict(set)
        for condition in found.conditions:
            owners[condition.node].add(condition.replica)
        assert all(len(names) == 1 for names in owners.values()), owners  # each node is watched exactly once
        by_replica: dict[str, list[str]] = defaultdict(list)
        for node, names in owners.items():
            by_replica[next(iter(names))].append(node)
        assert set(by_replica) == {"r1", "r2"}  # both replicas work
        evicted = [c.node for c in found.commands if c.kind == "evict"]
        assert sorted(evicted) == sorted(NODES)  # one eviction per node, not two

        # r1 dies without giving its leases back: after one TTL r2 takes its nodes over.
        orphan = by_replica["r1"][0]
        await first.crash()
        kv = await js.key_value(BUCKET)
        assert (await kv.get("replicas.r1")).value == b"r1"  # nothing was given back: the lease must expire
        del replicas["r1"]
        before = len(found.commands)
        conditions_before = len(found.conditions)
        deadline = time.monotonic() + 15
        while not any(c.node == orphan for c in found.commands[before:]):
            assert time.monotonic() < deadline, f"{orphan} was not taken over"
            await send(js, pressure(orphan))
            await asyncio.sleep(0.3)
        # A replica publishes a decision's commands first and the node's condition after them, on another subject:
        # the command arriving does not mean the condition has. Wait for it rather than read the list at once.
        await found.wait_for(lambda f: any(c.node == orphan for c in f.conditions[conditions_before:]))
        taken = [c for c in found.conditions[conditions_before:] if c.node == orphan]
        assert {c.replica for c in taken} == {"r2"}, taken  # r1 is dead: only r2 watches its node now
        await wait_until(lambda: second.ctx.load.get("partitions") == 8.0)
    finally:
        for replica in replicas.values():
            await replica.stop()


async def test_a_clean_stop_hands_leases_over_at_once(nats_url: str, nc: Any, js: Any) -> None:
    first = await start_replica(nats_url, "r1", **LEASES)
    second = await start_replica(nats_url, "r2", **LEASES)
    try:
        await wait_until(lambda: second.ctx.load.get("partitions") == 4.0)
        await first.stop()
        # The leases are deleted on the way out (not left to expire): no partition is held by r1 any more.
        kv = await js.key_value(BUCKET)
        holders = []
        for partition in range(LEASES["partitions"]):
            with contextlib.suppress(KeyNotFoundError):
                holders.append((await kv.get(f"p.{partition}")).value.decode())
        assert "r1" not in holders
        with pytest.raises(KeyNotFoundError):
            await kv.get("replicas.r1")
        await wait_until(lambda: second.ctx.load.get("partitions") == 8.0)
    finally:
        await second.stop()
