"""Partition leases on a real nats-server (docs/replicas.md "A replica dies"): a peer whose connection is gone — as
after SIGKILL — is found dead through NATS's "no responders" on its health subject and its partitions are taken
well before the lease TTL; a peer only wrongly thought dead lets its partitions go at its next renewal, and the KV
bucket never names two owners of a partition."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from nats.js.errors import KeyNotFoundError

from eru.bus import connect
from eru.bus.leases import PartitionLeases, health_probe
from eru.bus.subjects import service_health

TTL = 30.0  # far longer than any wait below: whatever moves, the lease did not expire
PARTITIONS = 8


async def replica(nats_url: str, name: str) -> tuple[Any, Any, PartitionLeases]:
    """A replica's connection, its health endpoint (what every eru service answers) and its leases."""
    nc = await connect(nats_url, name=name)

    async def health(msg: Any) -> None:
        await msg.respond(b"ready")

    subscription = await nc.subscribe(service_health("allocator", name), cb=health)
    leases = PartitionLeases(nc.jetstream(), "test_leases", name, PARTITIONS, TTL, probe=health_probe(nc, "allocator"))
    await leases.start()
    return nc, subscription, leases


async def split(a: PartitionLeases, b: PartitionLeases) -> None:
    for leases in (a, b, a, b, a, b):
        await leases.tick()
    assert len(a.owned) == len(b.owned) == PARTITIONS // 2
    assert set(a.peers) == {b.replica}
    assert set(b.peers) == {a.replica}


async def owners(leases: PartitionLeases) -> dict[int, str]:
    found = {}
    for partition in range(PARTITIONS):
        with contextlib.suppress(KeyNotFoundError):  # free for a moment (given back, not taken yet)
            found[partition] = ((await leases.kv.get(f"p.{partition}")).value or b"").decode()
    return found


async def test_a_killed_peers_partitions_are_taken_within_a_second_or_two_not_the_ttl(nats_url: str) -> None:
    nc_a, _, a = await replica(nats_url, "alloc-a")
    nc_b, _, b = await replica(nats_url, "alloc-b")
    try:
        await split(a, b)
        assert await a.find_dead() == set()  # alive: it answers
        await nc_b.close()  # SIGKILL: its connection closes, nothing is given back
        killed = time.monotonic()
        while not await a.find_dead():
            assert time.monotonic() - killed < 5.0, "the dead peer was not found"
            await asyncio.sleep(0.2)
        gained, _ = await a.tick()
        took = time.monotonic() - killed
        assert len(gained) == PARTITIONS // 2
        assert len(a.owned) == PARTITIONS
        assert set((await owners(a)).values()) == {"alloc-a"}
        assert took < 3.0, took  # two probes and a tick, against a TTL of 30 s
    finally:
        await nc_a.close()


async def test_a_peer_wrongly_thought_dead_lets_go_and_no_partition_ever_has_two_owners(nats_url: str) -> None:
    nc_a, _, a = await replica(nats_url, "alloc-a")
    nc_b, health_b, b = await replica(nats_url, "alloc-b")
    try:
        await split(a, b)
        await health_b.unsubscribe()  # alive, but its health endpoint is away (a reconnect in progress)
        await nc_b.flush()
        answers: list[bool | None] = []
        probe = a.probe
        assert probe is not None

        async def recorded(name: str) -> bool | None:
            answers.append(await probe(name))
            return answers[-1]

        a.probe = recorded
        # `confirm` rounds of "no responders" in a row; a round that times out (a 0.5 s stall of this process or
        # the server, seen once in CI) is unknown by design and keeps the count, so wait for the verdict, bounded
        deadline = time.monotonic() + 10.0
        dead: set[str] = set()
        while not dead:
            assert time.monotonic() < deadline, f"not found dead: {answers}"
            dead = await a.find_dead()
        assert dead == {b.replica}
        assert True not in answers, answers  # never answered as alive once its endpoint was away
        assert answers.count(False) == a.confirm, answers
        await a.tick()
        assert len(a.owned) == PARTITIONS
        _, lost = await b.tick()  # its renewals fail at the revisions it knew: it stops working on them
        assert len(lost) == PARTITIONS // 2
        assert b.owned == {}
        # back to a fair split over the next ticks; at every step the bucket names one owner per partition and
        # no replica believes it owns a partition the bucket gives to the other
        for _ in range(4):
            for leases in (a, b):
                await leases.tick()
                table = await owners(a)
                assert all(table.get(p) == "alloc-a" for p in a.owned)
                assert all(table.get(p) == "alloc-b" for p in b.owned)
                assert set(a.owned).isdisjoint(b.owned)
        assert len(a.owned) == len(b.owned) == PARTITIONS // 2
    finally:
        await nc_a.close()
        await nc_b.close()
