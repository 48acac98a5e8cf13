"""Busy partitions move between allocator replicas on a real nats-server (docs/replicas.md "Busy partitions move"):
three replicas share 16 partitions; when the lead replica (partition 0) also plans two busy pods, it hands the
lead to one idle replica and one busy partition to the other over `eru.partition.work` and the lease bucket; each
receiver adopts its lease and runs that partition's consumer at once (not at its next tick), and nothing moves back
while the work stays where it is."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from bus_helpers import eventually

from eru.bus import connect
from eru.bus.balance import BUSY_REQUESTS, LEAD, units
from eru.bus.leases import partition_of
from eru.bus.streams import provision_streams
from eru_allocator.intake.routing import Partitions

TTL = 6.0  # a tick every 2 s: the moves below come from the work reports, not from a tick


class Idle:
    """A partition consumer that only waits for its stop (what it would consume is not the point here)."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop

    async def run(self) -> None:
        await self.stop.wait()


async def replica(nats_url: str, name: str, taken: list[tuple[str, int]]) -> tuple[Any, Partitions]:
    nc = await connect(nats_url, name=name)

    def make(partition: int, stop: asyncio.Event) -> Any:
        taken.append((name, partition))
        return Idle(stop)

    return nc, Partitions(nc.jetstream(), name, 16, TTL, make, nc=nc)


def pods_of(partitions: set[int], count: int) -> list[str]:
    """`count` pod names hashing into distinct partitions of `partitions`."""
    found: dict[int, str] = {}
    for i in range(10_000):
        partition = partition_of(f"pod-{i}", 16)
        if partition in partitions and partition not in found:
            found[partition] = f"pod-{i}"
        if len(found) == count:
            return sorted(found.values(), key=lambda pod: partition_of(pod, 16))
    raise AssertionError(f"no {count} pods in {partitions}")


async def test_the_lead_and_a_busy_partition_are_handed_to_the_idle_replicas(nats_url: str, js: Any) -> None:
    await provision_streams(js)
    taken: list[tuple[str, int]] = []
    stopping = asyncio.Event()
    replicas = [await replica(nats_url, f"alloc-{n}", taken) for n in "abc"]
    parts = {p.leases.name: p for _, p in replicas}
    tasks = []
    for _, partitions in replicas:
        await partitions.start()
        tasks.append(asyncio.create_task(partitions.run(stopping)))
    feeding: asyncio.Task[None] | None = None
    try:
        # settled: every partition held once, each replica knows both peers and has heard their reports
        await eventually(
            lambda: (
                sorted(p for x in parts.values() for p in x.leases.owned) == list(range(16))
                and all(len(x.ledger.peers(set(x.leases.peers), _now())) == 2 for x in parts.values())
            ),
            timeout=60,
        )
        lead = next(x for x in parts.values() if x.leads())
        low, high = pods_of(set(lead.leases.owned) - {LEAD}, 2)
        idle = sorted(x.leases.replica for x in parts.values() if x is not lead)

        async def feed() -> None:
            """Whoever holds each pod plans a steady trickle of it (a busy pod), as the intake would make it."""
            while True:
                for pod in (low, high):
                    for x in parts.values():
                        if x.owns(pod):
                            for _ in range(BUSY_REQUESTS // 4):
                                x.planned(pod)
                await asyncio.sleep(0.25)

        feeding = asyncio.create_task(feed())
        moved = partition_of(high, 16)
        # the lead goes to the first idle replica by name, the higher busy partition to the other: well within a
        # tick of becoming busy (the receivers adopt when they hear the report)
        await eventually(lambda: parts[idle[0]].leads() and parts[idle[1]].owns(high) and not lead.leads(), timeout=30)
        assert lead.owns(low)
        assert not lead.owns(high)
        assert (idle[1], moved) in taken  # its consumer runs on the receiver
        assert moved not in lead.running
        assert LEAD in parts[idle[0]].running
        # a few ticks later nothing has moved back or on: one unit of work each
        await asyncio.sleep(2.5 * TTL / 3)
        assert parts[idle[0]].leads()
        assert parts[idle[1]].owns(high)
        assert lead.owns(low)
        for x in parts.values():
            report = x.ledger.report(x.leases.owned, _now())
            assert units(report.owned, report.busy) == 1, (x.leases.replica, report)
        # the bucket agrees: every partition named once, by the replica that runs it
        assert sorted(p for x in parts.values() for p in x.leases.owned) == list(range(16))
    finally:
        if feeding is not None:
            feeding.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feeding
        stopping.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=30)
        for nc, _ in replicas:
            await nc.close()


def _now() -> float:
    return asyncio.get_running_loop().time()
