"""Two allocator replicas reading one shared deploy intake on a real nats-server (docs/replicas.md "Who reads the
intake"): the replica that only passes requests on fetches one at a time, the pod's owner takes the rest, every
request is handled exactly once, and a replica that gains the pod's partition reads at full batches at once."""

from __future__ import annotations

import asyncio
from typing import Any

from bus_helpers import eventually

from eru.bus.consumer import ConsumerOptions, Delivery
from eru.bus.envelope import Envelope, new_envelope
from eru.bus.leases import partition_of
from eru.bus.publish import publish
from eru.bus.streams import DEPLOY, provision_streams
from eru.bus.subjects import DEPLOY_REQUEST
from eru.domain import DeployRequest
from eru.testing.memory_store import InMemoryStore
from eru_allocator.intake.routing import IntakeConsumer, LeadPaced, Partitions

POD = "bench"
OPTIONS = ConsumerOptions(batch=16, concurrency=64, fetch_timeout_seconds=0.2)


class Replica:
    """One replica's intake consumer; its handler records what it planned here and what it would route."""

    def __init__(self, js: Any, name: str) -> None:
        self.partitions = Partitions(js, name, 16, 5.0, lambda _p, _s: None)  # type: ignore[arg-type,return-value]
        self.planned: list[str] = []
        self.routed: list[str] = []
        self.batches: list[int] = []
        self.consumer = Paced(
            js,
            DEPLOY,
            "allocator-deploy",
            DEPLOY_REQUEST,
            DeployRequest,
            self.handle,
            options=OPTIONS,
            store=InMemoryStore(),  # its dead letters (none reach it here: poison never decodes)
            partitions=self.partitions,
            batches=self.batches,
        )
        self.task = asyncio.create_task(self.consumer.run())

    async def handle(self, request: DeployRequest, _envelope: Envelope, delivery: Delivery) -> None:
        assert request.request_id is not None
        if self.partitions.plans_here(request.pod, delivery):
            self.planned.append(request.request_id)
        else:
            self.routed.append(request.request_id)

    def lease(self, pod: str) -> None:
        """As a won lease does: the partition is this replica's, and its intake consumers are told."""
        self.partitions.leases.owned[partition_of(pod, 16)] = 1
        self.partitions.notify_gained()

    async def stop(self) -> None:
        self.consumer.stop()
        await asyncio.wait_for(self.task, timeout=10)


class Paced(IntakeConsumer):
    """The intake consumer, recording the batch it asks for before each fetch."""

    def __init__(self, *args: Any, batches: list[int], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.asked = batches

    async def next_batch(self, free: int) -> int:
        batch = await super().next_batch(free)
        self.asked.append(batch)
        return batch


async def send(js: Any, tag: str, count: int) -> None:
    for i in range(count):
        request = DeployRequest.model_validate(
            {"request_id": f"{tag}-{i}", "pod": POD, "count": 1, "workload": {"name": "w", "image": "busybox"}}
        )
        await publish(js, DEPLOY_REQUEST, request, new_envelope("eru.deploy.request", "test"))


async def test_the_owner_takes_the_intake_and_the_other_replica_one_at_a_time(js: Any) -> None:
    await provision_streams(js)
    owner, other = Replica(js, "allocator-1"), Replica(js, "allocator-2")
    owner.lease(POD)
    try:
        await send(js, "a", 300)
        await eventually(lambda: len(owner.planned) + len(other.routed) >= 300, timeout=60)
        handled = owner.planned + other.routed
        assert sorted(handled) == sorted(f"a-{i}" for i in range(300))  # each request once: none lost or doubled
        assert other.planned == []
        assert owner.routed == []
        assert all(batch == 1 for batch in other.batches)  # the router never took more than one at a time
        assert max(owner.batches) == OPTIONS.batch  # the owner took full batches
        assert len(other.routed) < len(owner.planned)

        # the other replica gains the pod's partition (a lease moved): at full batches from its next fetch on
        owner.partitions.leases.owned.clear()
        other.lease(POD)
        before = len(other.batches)
        await send(js, "b", 200)
        await eventually(lambda: len(other.planned) + len(owner.routed) >= 200, timeout=60)
        assert sorted(other.planned + owner.routed) == sorted(f"b-{i}" for i in range(200))
        assert max(other.batches[before:]) == OPTIONS.batch
        assert len(owner.routed) < len(other.planned)  # the old owner, routing now, slowed down in turn
    finally:
        await owner.stop()
        await other.stop()


async def test_node_reports_are_read_at_full_batches_by_the_lead_replica_only(js: Any) -> None:
    await provision_streams(js)
    lead, other = Partitions(js, "a-1", 16, 5.0, _none), Partitions(js, "a-2", 16, 5.0, _none)  # type: ignore[arg-type]
    lead.leases.owned[0] = 1  # partition 0: the lead
    seen: dict[str, list[str]] = {"a-1": [], "a-2": []}
    asked: dict[str, list[int]] = {"a-1": [], "a-2": []}
    consumers = [
        LeadRecorder(js, partitions, seen[name], asked[name]) for name, partitions in (("a-1", lead), ("a-2", other))
    ]
    tasks = [asyncio.create_task(consumer.run()) for consumer in consumers]
    try:
        await send(js, "n", 200)
        await eventually(lambda: len(seen["a-1"]) + len(seen["a-2"]) >= 200, timeout=60)
        assert sorted(seen["a-1"] + seen["a-2"]) == sorted(f"n-{i}" for i in range(200))  # each once
        assert set(asked["a-2"]) == {1}  # the other replica: one message at a time
        assert max(asked["a-1"]) == OPTIONS.batch
        assert len(seen["a-2"]) < len(seen["a-1"])

        # partition 0 moves to the other replica: it leads from its next fetch on, the first one reads one at a time
        lead.leases.owned.clear()
        other.leases.owned[0] = 1
        other.notify_gained()
        before = {name: len(names) for name, names in seen.items()}
        await send(js, "m", 200)
        await eventually(lambda: sum(len(names) for names in seen.values()) >= 400, timeout=60)
        assert len(seen["a-2"]) - before["a-2"] > len(seen["a-1"]) - before["a-1"]
        assert max(asked["a-2"]) == OPTIONS.batch
    finally:
        for consumer in consumers:
            consumer.stop()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)


def _none(_partition: int, _stop: asyncio.Event) -> Any:
    return None


class LeadRecorder(LeadPaced[DeployRequest]):
    """A node-report consumer (any message type does: here the deploy requests already sent), recording what it
    handled and the batch it asked for before each fetch."""

    def __init__(self, js: Any, partitions: Partitions, seen: list[str], asked: list[int]) -> None:
        super().__init__(
            js,
            DEPLOY,
            "node-reports",
            DEPLOY_REQUEST,
            DeployRequest,
            self.handle,
            options=OPTIONS,
            partitions=partitions,
        )
        self.seen = seen
        self.asked = asked

    async def handle(self, request: DeployRequest, _envelope: Envelope, _delivery: Delivery) -> None:
        assert request.request_id is not None
        self.seen.append(request.request_id)

    async def next_batch(self, free: int) -> int:
        batch = await super().next_batch(free)
        self.asked.append(batch)
        return batch


async def test_poison_messages_are_read_at_full_batches(js: Any) -> None:
    """A run of undecodable requests is settled (dead-lettered) by whichever replica reads it: that is its own work,
    so it reads them at full batches, not one at a time (1,000 of them held up later deploys for minutes)."""
    await provision_streams(js)
    alone = Replica(js, "allocator-1")  # leases nothing: every good request would be routed
    try:
        for _ in range(200):
            await js.publish(DEPLOY_REQUEST, b"\xc1 not msgpack")
        stats = alone.consumer.stats
        await eventually(lambda: stats.rejected + stats.dead_lettered >= 200, timeout=60)
        assert max(alone.batches) == OPTIONS.batch
        assert alone.routed == []
    finally:
        await alone.stop()


class GatedLead(LeadRecorder):
    """A node-report consumer whose second `next_batch` waits for the test: what its first, full request brings
    meanwhile is delivered to it while it still leads."""

    def __init__(self, *args: Any, options: ConsumerOptions, gate: asyncio.Event, paused: asyncio.Event) -> None:
        super().__init__(*args)
        self.options = options
        self.gate = gate
        self.paused = paused

    async def next_batch(self, free: int) -> int:
        if len(self.asked) == 1:
            self.paused.set()
            await self.gate.wait()
        return await super().next_batch(free)


async def test_a_replica_that_stops_leading_handles_at_once_what_it_was_delivered(js: Any) -> None:
    """Found in `bench_deploy.py --replicas 3 --pods 2`: a replica handed the lead away while its full request for
    node reports stayed open; the ~30 container events delivered to it then were applied one per paced fetch, one a
    second, and their deploys completed 20 s late. Delivered messages are this replica's: it handles them at once
    (docs/bus.md "Fetching"); only its asking is paced. Before the fix the 31 took ~27 s here."""
    await provision_streams(js)
    partitions = Partitions(js, "a-1", 16, 5.0, _none)  # type: ignore[arg-type]
    partitions.leases.owned[0] = 1  # the lead: its first request asks for a full batch
    seen: list[str] = []
    asked: list[int] = []
    gate, paused = asyncio.Event(), asyncio.Event()
    options = ConsumerOptions(batch=32, concurrency=64, fetch_timeout_seconds=30.0)  # the request stays open
    consumer = GatedLead(js, partitions, seen, asked, options=options, gate=gate, paused=paused)
    task = asyncio.create_task(consumer.run())
    try:
        await send(js, "first", 1)
        await asyncio.wait_for(paused.wait(), timeout=10)
        assert asked == [32]
        partitions.leases.owned.clear()  # the lead moves away
        await send(js, "rest", 31)  # delivered to the request still open, while the consumer waits at the gate

        async def all_delivered() -> bool:
            info = await js.consumer_info(DEPLOY, "node-reports")
            return bool(info.delivered.consumer_seq == 32)

        await eventually(all_delivered, timeout=10)
        gate.set()
        await eventually(lambda: len(seen) == 32, timeout=5)
        assert sorted(seen) == sorted(["first-0", *(f"rest-{i}" for i in range(31))])
    finally:
        gate.set()
        consumer.stop()
        await asyncio.wait_for(task, timeout=10)
