"""Deploy work partitioned by pod between allocator replicas (docs/replicas.md).

A pod's deploys hash into one of `allocator.partitions` partitions (`eru.bus.leases.partition_of(pod)`); each
partition is leased by one replica at a time (KV bucket `eru_allocator_leases`). Clients publish where they always
did (`eru.deploy.request`, `eru.t.<tenant>.deploy.request`), taken by whichever replica fetches them from the shared
intake consumers. That replica

* plans the request itself when it leases the pod's partition (no extra hop: with one replica, always), or
* routes it, unchanged, to `eru.partition.<n>.deploy` (work-queue stream ERU_PARTITIONS) and acknowledges the
  intake message once JetStream stored the routed copy. The copy keeps the request's envelope (so its request key,
  hence at-most-once through `settled_requests`, is the same), its `Eru-Reply-To` (the owner answers the client
  directly) and the subject it was published on (`Eru-Origin-Subject`: a tenant's request stays scoped to it). Its
  `Nats-Msg-Id` is the intake message's stream position, so a redelivered intake message routes it once.

The partition's owner reads `allocator-partition-<n>`, a durable consumer filtered on that partition's subject.
When it gains a partition it re-creates that consumer: on a work-queue stream what is left is exactly what no
replica acknowledged, so the requests a dead replica had taken come again at once instead of after `ack_wait`
(each is planned at most once anyway: the request key). Before giving a partition back (a replica joined) it lets
the partition's requests in flight finish, so the next owner does not redo them.

Routing costs a JetStream write, fetch and acknowledgement more per request, so a replica reads the intake as fast
as it finds its own work there (`IntakeConsumer`, `eru.bus.intake_pace`): the owner of a busy pod takes full
batches, a replica that only passes requests on takes one now and then, and the owner reads the rest itself.

Busy partitions move (`eru.bus.balance`): the replicas tell each other on `eru.partition.work` which partitions they
hold and which are busy; one with two units of work (busy partitions, the lead's relaying) hands a lease over to an
idle peer (`PartitionLeases.transfer`), which adopts it at once when it hears of it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from pydantic import BaseModel

from eru.bus import Consumer, Delivery, Envelope, Retryable
from eru.bus.balance import LEAD, WorkLedger, WorkReport
from eru.bus.codec import decode, encode
from eru.bus.connection import describe
from eru.bus.envelope import H_ID, H_MSG_ID
from eru.bus.intake_pace import Pace, next_pace
from eru.bus.leases import PartitionLeases, Probe, partition_of
from eru.bus.streams import PARTITIONS
from eru.bus.subjects import H_ORIGIN_SUBJECT, PARTITION_WORK, partition_deploy
from eru_allocator.delivery.settled import DeployConsumer
from eru_allocator.flow.until_set import until_set

log = structlog.get_logger()
ModelT = TypeVar("ModelT", bound=BaseModel)

LEASE_BUCKET = "eru_allocator_leases"
DELETE_SECONDS = 1.0  # a partition consumer's delete at takeover, bounded (see _consume)
LEAD_PARTITION = LEAD  # its holder relays the outbox and reads node reports at full speed
PROBE_SECONDS = 0.5  # how often the peers are asked whether they are there (two "nobody" answers: dead)
ConsumerFactory = Callable[[int, asyncio.Event], Consumer[Any]]


def partition_consumer(partition: int) -> str:
    """The durable consumer of partition n: `allocator-partition-<n>`."""
    return f"allocator-partition-{partition}"


def routed_headers(delivery: Delivery, envelope: Envelope) -> dict[str, str]:
    """The routed copy's headers: the client's (envelope, reply address, content type), `Eru-Origin-Subject`, and a
    `Nats-Msg-Id` naming the intake message, so routing it twice stores it once."""
    headers = {k: v for k, v in delivery.headers.items() if not k.startswith("Nats-")}
    if H_ID not in headers:  # a plain client's message: keep the stand-in envelope, hence the same request key
        headers.update({k: v for k, v in envelope.to_headers().items() if k != H_MSG_ID})
    headers[H_ORIGIN_SUBJECT] = delivery.subject  # never the client's own header of that name
    headers[H_MSG_ID] = f"route:{delivery.stream}:{delivery.stream_sequence}"
    return headers


class Partitions:
    """This replica's share of the deploy work: its leases, the partition consumers it runs, and routing."""

    def __init__(
        self,
        js: JetStreamContext,
        replica: str,
        partitions: int,
        ttl_seconds: float,
        make_consumer: ConsumerFactory,
        copies: int = 1,
        probe: Probe | None = None,
        probe_seconds: float = PROBE_SECONDS,
        nc: Client | None = None,
    ) -> None:
        self.js = js
        self.nc = nc  # with it, busy partitions move between replicas (work reports on `eru.partition.work`)
        self.leases = PartitionLeases(js, LEASE_BUCKET, replica, partitions, ttl_seconds, copies, probe=probe)
        self.probe_seconds = probe_seconds
        # a peer's report is evidence for two ticks: a replica gone quiet is not taken for an idle one
        self.ledger = WorkLedger(self.leases.replica, fresh_seconds=2 * ttl_seconds / 3)
        self._wake = asyncio.Event()  # a partition became busy, or a peer handed one over: balance now
        self._adopt: set[int] = set()
        self.make_consumer = make_consumer
        self.running: dict[int, tuple[Consumer[Any], asyncio.Task[None], asyncio.Event]] = {}
        self.routed = 0
        self.local = 0
        self._tally: dict[str, tuple[int, int]] = {}  # intake consumer -> (planned here, routed) since it last fetched
        self._gained: list[asyncio.Event] = []  # one per intake consumer: set when this replica gains partitions

    @property
    def count(self) -> int:
        """The number of partitions."""
        return self.leases.partitions

    def owns(self, pod: str) -> bool:
        """True when this replica leases `pod`'s partition now."""
        return self.leases.owns(pod)

    def leads(self) -> bool:
        """True when this replica leases partition 0: it relays the outbox and reads the node reports at full speed
        (docs/replicas.md "One replica relays"); with one replica, always."""
        return LEAD_PARTITION in self.leases.owned

    def plans_here(self, pod: str, delivery: Delivery) -> bool:
        """Whether the request taken from an intake consumer is planned here (this replica leases `pod`'s
        partition) or routed; counted for that consumer's pace (`IntakeConsumer`)."""
        here = self.owns(pod)
        local, routed = self._tally.get(delivery.consumer, (0, 0))
        self._tally[delivery.consumer] = (local + 1, routed) if here else (local, routed + 1)
        if here:
            self.local += 1
            self.planned(pod)
        return here

    def planned(self, pod: str) -> None:
        """Count a request of `pod` planned here (for the balancing: which partitions are busy)."""
        if self.ledger.planned(partition_of(pod, self.count)):
            self._wake.set()

    def take_tally(self, consumer: str) -> tuple[int, int]:
        """(planned here, routed) of `consumer`'s requests since the last call."""
        return self._tally.pop(consumer, (0, 0))

    def notify_gained(self) -> None:
        """Tell the intake consumers this replica gained partitions: their requests may be its own work now."""
        for event in self._gained:
            event.set()

    def on_gain(self) -> asyncio.Event:
        """An event set whenever this replica gains partitions (an intake consumer then reads at full speed)."""
        event = asyncio.Event()
        self._gained.append(event)
        return event

    async def start(self) -> None:
        """Open the lease bucket, listen to the peers' work reports and take a first share."""
        await self.leases.start()
        if self.nc is not None:
            await self.nc.subscribe(PARTITION_WORK, cb=self._on_report)
        await self._tick()

    async def run(self, stopping: asyncio.Event) -> None:
        """Renew and rebalance every third of the lease TTL until `stopping`, then give every lease back. Between
        ticks, probe the peers every `probe_seconds` and tick at once when one is found dead (its partitions are
        free then); a failed tick is tried again after 0.25 s, doubling up to the interval (docs/replicas.md)."""
        interval = self.leases.ttl_seconds / 3
        probing = self.leases.probe is not None
        loop = asyncio.get_running_loop()
        next_tick = loop.time() + interval
        next_probe = loop.time() + self.probe_seconds
        failures = 0
        try:
            while not stopping.is_set():
                wake = min(next_tick, next_probe) if probing else next_tick
                await until_set(max(0.0, wake - loop.time()), stopping, self._wake)
                if stopping.is_set():
                    break
                if self._wake.is_set():
                    self._wake.clear()
                    with contextlib.suppress(Exception):  # the next tick balances again
                        await self._balance()
                if probing and loop.time() >= next_probe:
                    # on its own clock: ticks failing and retried often (a loaded bus) must not starve the probes
                    next_probe = loop.time() + self.probe_seconds
                    with contextlib.suppress(Exception):  # unknown answers are no evidence; the next round asks again
                        if await self.leases.find_dead():
                            next_tick = loop.time()
                if loop.time() < next_tick:
                    continue
                try:
                    await self._tick()
                    failures = 0
                    next_tick = loop.time() + interval
                except Exception as error:  # NATS away: try again soon; the leases may expire meanwhile
                    failures += 1
                    next_tick = loop.time() + min(interval, 0.25 * 2 ** (failures - 1))
                    log.warning("allocator.lease_tick_failed", error=str(error) or type(error).__name__)
        finally:
            with contextlib.suppress(Exception):
                await self.leases.release_all(self._finish)
            await self._finish(set(self.running))

    async def _tick(self) -> None:
        now = asyncio.get_running_loop().time()
        busy = frozenset(self.ledger.report(self.leases.owned, now).busy)
        gained, lost = await self.leases.tick(self._finish, busy)
        for partition in lost & set(self.running):
            # lost without giving it back (our lease expired): the new owner re-reads what we had not acknowledged
            _, _, stop = self.running.pop(partition)
            stop.set()
        for partition in sorted(gained):
            await self._take(partition)
        if gained:
            self.notify_gained()
        self.ledger.roll()
        await self._balance()

    async def _balance(self) -> None:
        """Adopt the partitions peers handed over, hand over what `eru.bus.balance.handovers` says, and report."""
        if self.nc is None:
            return
        loop = asyncio.get_running_loop()
        adopted = False
        for partition in sorted(self._adopt - set(self.leases.owned)):
            if await self.leases.adopt(partition):
                self.ledger.received(partition, loop.time())
                await self._take(partition)
                adopted = True
        self._adopt.clear()
        if adopted:
            self.notify_gained()
        for partition, peer in self.ledger.moves(self.leases.owned, set(self.leases.peers), loop.time()):
            await self._finish({partition})  # its requests in flight first, as before giving a lease back
            try:
                handed = await self.leases.transfer(partition, peer)
            except Exception as error:  # unsure whether it landed: the lease expires, a replica below its share
                # takes it at its next tick
                log.warning("allocator.handover_failed", partition=partition, peer=peer, error=describe(error))
                continue
            if handed:
                self.ledger.gave(partition, peer, loop.time())
                log.info("allocator.partition_handed", partition=partition, peer=peer)
        report = self.ledger.report(self.leases.owned, loop.time())
        await self.nc.publish(PARTITION_WORK, encode(report))

    async def _on_report(self, msg: Msg) -> None:
        """A peer's work report: kept for the balancing; partitions it handed to this replica are adopted now."""
        try:
            report = decode(msg.data, WorkReport, msg.header.get("Content-Type") if msg.header else None)
        except Exception as error:  # a bad report is no evidence: ignored, the replica keeps going
            log.warning("allocator.work_report_invalid", error=describe(error))
            return
        mine = self.ledger.heard(report, asyncio.get_running_loop().time())
        if mine - set(self.leases.owned):
            self._adopt |= mine
            self._wake.set()

    async def _take(self, partition: int) -> None:
        stop = asyncio.Event()
        consumer = self.make_consumer(partition, stop)
        task = asyncio.create_task(self._consume(partition, consumer, stop), name=f"consumer-{partition}")
        self.running[partition] = (consumer, task, stop)
        log.info("allocator.partition_taken", partition=partition)

    async def _consume(self, partition: int, consumer: Consumer[Any], stop: asyncio.Event) -> None:
        """Re-read everything nobody acknowledged (a fresh durable), then consume until `stop`. Creating the consumer
        fails while JetStream elects a new leader after a server died (503, no responders): that is retried every
        second, never left as a dead task with the partition unread (found by the compose failover test, which kills
        the partition's owner and the deploy stream's leader together: docs/deploy.md)."""
        durable = partition_consumer(partition)
        while True:
            try:
                try:
                    await asyncio.wait_for(self.js.delete_consumer(PARTITIONS, durable), timeout=DELETE_SECONDS)
                except NotFoundError:
                    pass
                except Exception as error:  # JetStream's meta leader electing: bind the durable as it is, whose
                    # unacknowledged messages come back after ack_wait instead of at once
                    log.info("allocator.partition_consumer_kept", partition=partition, error=describe(error))
                await consumer.run()
                return
            except Exception as error:  # JetStream unavailable for a moment: try again unless stopped
                log.warning(
                    "allocator.partition_consumer_failed", partition=partition, error=str(error) or type(error).__name__
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=1.0)
            if stop.is_set():
                return
            consumer = self.make_consumer(partition, stop)

    async def _finish(self, partitions: set[int]) -> None:
        """Stop the consumers of `partitions` and let their requests in flight finish (bounded by a lease TTL)."""
        stopping = [self.running.pop(p) for p in sorted(partitions) if p in self.running]
        for _, _, stop in stopping:
            stop.set()
        tasks = [task for _, task, _ in stopping]
        if tasks:
            await asyncio.wait(tasks, timeout=self.leases.ttl_seconds)

    def tasks(self) -> list[asyncio.Task[None]]:
        """The partition consumers running now."""
        return [task for _, task, _ in self.running.values()]

    async def route(self, pod: str, delivery: Delivery, envelope: Envelope) -> int:
        """Store the request in its pod's partition (`eru.partition.<n>.deploy`); returns the partition. Raises
        `Retryable` when JetStream does not take it (the intake message then comes back)."""
        partition = partition_of(pod, self.leases.partitions)
        try:
            await self.js.publish(
                partition_deploy(partition), delivery.payload, headers=routed_headers(delivery, envelope)
            )
        except Exception as error:
            raise Retryable(f"could not route to partition {partition}: {error or type(error).__name__}") from error
        self.routed += 1
        return partition


class IntakeConsumer(DeployConsumer):
    """A shared intake consumer (`allocator-deploy`, `allocator-tenant-deploy`) read at the pace of the work this
    replica finds there for itself (`eru.bus.intake_pace`, docs/replicas.md "Who reads the intake")."""

    def __init__(self, *args: Any, partitions: Partitions, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.partitions = partitions
        self.pace = Pace.start()
        self._gained = partitions.on_gain()  # set when this replica gains partitions
        self._settled = 0  # the consumer's rejected + dead-lettered count at its last fetch

    async def next_batch(self, free: int) -> int:
        """The paced batch: full while this replica plans what it fetches, else one after a growing wait."""
        await asyncio.sleep(0)  # the requests just fetched decide first (plan here or route): their count is read
        local, routed = self.partitions.take_tally(self.durable)
        # a message refused or dead-lettered here (undecodable, invalid) is this replica's own work: any replica
        # settles it where it is, so a run of poison messages is read at full batches, not one at a time
        settled = self.stats.rejected + self.stats.dead_lettered
        local += settled - self._settled
        self._settled = settled
        if self._gained.is_set():  # what was routed before may be this replica's own work now
            self._gained.clear()
            self.pace = Pace.start()
        else:
            self.pace = next_pace(self.pace, local, routed)
        if self.pace.delay > 0:
            await until_set(self.pace.delay, self._stopping, self._gained)
        return self.pace.size(min(free, self.options.batch))


class LeadPaced(Consumer[ModelT], Generic[ModelT]):
    """A shared consumer of node reports (container events, heartbeats, inventories, conditions, registrations)
    read at full batches by the lead replica (`Partitions.leads`) and one message at a time, after a wait doubling
    up to a second, by the others: one process applies them in large batches as a single replica would, and the
    others still drain them (slowly) while no replica leads (docs/replicas.md "One replica relays")."""

    def __init__(self, *args: Any, partitions: Partitions, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.partitions = partitions
        self.pace = Pace.start()
        self._gained = partitions.on_gain()  # set when this replica gains partitions

    async def next_batch(self, free: int) -> int:
        """Full while leading; else one, after the wait."""
        full = min(free, self.options.batch)
        self._gained.clear()
        if self.partitions.leads():
            self.pace = Pace(batch=0)
            return full
        self.pace = next_pace(self.pace, 0, 1)
        await until_set(self.pace.delay, self._stopping, self._gained)
        return full if self.partitions.leads() else 1
