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
from eru_allocator.routing import IntakeConsumer, Partitions

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
            pool=None,
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
