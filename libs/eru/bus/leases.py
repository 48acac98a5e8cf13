"""Partitions of a service's work and the leases that give each partition to one replica (docs/replicas.md).

Work is split into a fixed number of partitions by a stable hash of its key (`partition_of`: CRC-32 of the key
modulo the partition count, the same in every process and on every machine). Replicas hold partitions by lease in a
NATS KV bucket whose max age is the lease TTL, so an entry that is not renewed disappears:

* `replicas.<replica>`: a replica's heartbeat, put every tick;
* `p.<n>`: the lease of partition n, its value the owning replica; created only if absent (`create`), renewed only
  by its owner (`update` with the last revision), deleted on a clean stop or when given back.

Every tick (a third of the TTL) a replica renews its leases, counts the live replicas (their heartbeats, listed by
the server in one answer: `eru.bus.kv_keys`, never nats-py's `kv.keys()`, which can end early), gives back the
partitions above its fair share, ceil(partitions / replicas), and takes free ones up to it. A replica killed with
SIGKILL stops renewing: its entries expire within one TTL and the others take its partitions at their next tick, so
the takeover takes at most TTL + TTL/3 (5 s + 1.7 s with the allocator's defaults).

Faster when the service can tell a dead peer (`probe`, docs/replicas.md "A replica dies"): every `probe_seconds` each
live peer is asked whether it is there (the allocator: a request to the peer's health endpoint, which NATS answers
"no responders" at once when no process listens on it any more). `confirm` such answers in a row make the peer dead:
its heartbeat and the leases still holding its name are deleted (each only at the revision read, so nothing renewed
meanwhile is touched) and the survivors take them at once, without waiting for the TTL. A peer that was only
reconnecting is wrongly evicted at worst: its next renewal fails, it lets the partition go, and the brief overlap is
the one the services are correct under anyway (below).

Every KV operation is bounded by `op_timeout` (2 s): while the bucket's stream elects a new leader (its server died)
nobody answers, and a tick waiting out the JetStream context's 5 s would hold the renewals and the takeover for
that long after the election (1 s was too short at load 35+ on 2 cores: healthy renewals timed out and leases
churned). A tick that failed is tried again soon (0.25 s, doubling up to the tick interval).
A renewal that fails because the lease expired meanwhile (nobody else took it: an election longer than the TTL) or
because the last renewal was stored but its answer lost takes the lease back in place, instead of dropping and
re-taking the partition.

A lease is what makes the work *efficient*, not what makes it *correct*: for a moment after a lease moves two
replicas may both believe they own a partition (the old one notices at its next tick). Every service that uses these
leases stays correct without them (the allocator's pod lock and request keys, the eviction budget claims).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import zlib
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

import structlog
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.js import JetStreamContext, api
from nats.js.errors import BadRequestError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from eru.bus.balance import surplus
from eru.bus.kv_keys import live_entries
from eru.bus.subjects import service_health, token

log = structlog.get_logger()

REPLICA_PREFIX = "replicas."
LEASE_BYTES = 1024 * 1024

Release = Callable[[set[int]], Awaitable[None]]
# Is the replica of this name there? True: it answered; False: nobody listens (dead); None: unknown (timeout, or our
# own connection is away) — never counted as evidence.
Probe = Callable[[str], Awaitable[bool | None]]
T = TypeVar("T")
HEARTBEAT_ALIVE = b"alive"  # the heartbeat of a replica that cannot be probed (older versions): never evicted


def partition_of(key: str, partitions: int) -> int:
    """The partition of `key`: CRC-32 of its UTF-8 bytes modulo the partition count (stable across processes).

    >>> partition_of("default", 16)
    15
    """
    return zlib.crc32(key.encode()) % partitions


def fair_share(partitions: int, replicas: int) -> int:
    """How many partitions one replica holds at most: ceil(partitions / live replicas), e.g. 16 over 3 → 6."""
    return math.ceil(partitions / max(1, replicas))


def count_misses(
    misses: Mapping[str, int], answers: Mapping[str, bool | None], confirm: int
) -> tuple[dict[str, int], set[str]]:
    """The peers' consecutive "nobody there" answers after this round of probes, and those now confirmed dead (pure).

    An answer resets a peer's count, "nobody there" adds one, an unknown (None) keeps it; a peer no longer probed is
    forgotten. With `confirm` 2 and probes every 0.5 s, a peer is dead after two answers ≥ 0.5 s apart:

    >>> count_misses({"a-2": 1, "a-3": 1}, {"a-2": False, "a-3": True}, 2)
    ({'a-2': 2, 'a-3': 0}, {'a-2'})
    """
    counted = {}
    for peer, answer in answers.items():
        before = misses.get(peer, 0)
        counted[peer] = 0 if answer is True else before + 1 if answer is False else before
    return counted, {peer for peer, count in counted.items() if count >= confirm}


def health_probe(nc: Client, service: str, timeout: float = 0.5) -> Probe:
    """A `Probe` asking a peer replica's health endpoint (`eru.svc.<service>.<replica>.health`): an answer is
    alive, NATS's "no responders" (no process subscribed there: it died, its connection closed) is dead, anything
    else (a timeout, our own connection away) is unknown."""

    async def probe(replica: str) -> bool | None:
        try:
            await nc.request(service_health(service, replica), b"", timeout=timeout)
        except NoRespondersError:
            return False
        except Exception:  # a slow or unreachable peer is no evidence of a dead one
            return None
        return True

    return probe


class PartitionLeases:
    """One replica's partition leases in the KV bucket `bucket`; `tick()` every third of the TTL keeps them and
    rebalances."""

    def __init__(
        self,
        js: JetStreamContext,
        bucket: str,
        replica: str,
        partitions: int,
        ttl_seconds: float,
        copies: int = 1,
        *,
        probe: Probe | None = None,
        confirm: int = 2,
        op_timeout: float = 2.0,
    ) -> None:
        self.js = js
        self.copies = copies  # servers holding the bucket (a NATS cluster: `bus.stream_replicas`)
        self.bucket = bucket
        self.name = replica  # as the service knows itself (what `probe` is asked about)
        self.replica = token(replica.replace(".", "-"), "replica")
        self.partitions = partitions
        self.ttl_seconds = ttl_seconds
        self.probe = probe
        self.confirm = confirm
        self.op_timeout = op_timeout
        self.owned: dict[int, int] = {}  # partition -> revision of our lease
        self.peers: dict[str, str] = {}  # the other live replicas at the last tick: heartbeat key token -> name
        self.misses: dict[str, int] = {}
        self.live_seen: list[str] = []  # the live replicas at the last successful listing
        self._kv: KeyValue | None = None
        self._heartbeat_key = f"{REPLICA_PREFIX}{self.replica}"

    @property
    def kv(self) -> KeyValue:
        """The lease bucket (opened by `start`)."""
        if self._kv is None:
            raise RuntimeError("PartitionLeases.start() opens the lease bucket first")
        return self._kv

    async def _op(self, operation: Awaitable[T]) -> T:
        return await asyncio.wait_for(operation, timeout=self.op_timeout)

    async def start(self) -> None:
        """Create (or open) the lease bucket."""
        # a few hundred bytes per partition and replica: the cap only says so (every stream of eru has one)
        config = api.KeyValueConfig(
            bucket=self.bucket,
            history=1,
            ttl=self.ttl_seconds,
            storage=api.StorageType.MEMORY,
            max_bytes=LEASE_BYTES,
            replicas=self.copies,
        )
        try:
            self._kv = await self.js.create_key_value(config=config)
        except BadRequestError:
            self._kv = await self.js.key_value(self.bucket)

    def owns(self, key: str) -> bool:
        """True when this replica holds the partition of `key` now."""
        return partition_of(key, self.partitions) in self.owned

    async def live_replicas(self) -> list[str]:
        """The replicas whose heartbeat has neither expired nor been deleted, this one included, sorted; remembers
        the others under their own names (the heartbeat's value) for the probes.

        One server-side listing, then one read per peer (`eru.bus.kv_keys`, docs/replicas.md "Listing the
        heartbeats"): nats-py's `kv.keys()` can end early and list only this replica, whose fair share would then
        be every partition."""
        own = frozenset({self._heartbeat_key})
        entries = await live_entries(
            self.js, self.kv, self.bucket, REPLICA_PREFIX, skip=own, call_timeout=self.op_timeout
        )
        peers = {}
        for key, entry in entries.items():
            name = entry.value or b""
            if name and name != HEARTBEAT_ALIVE:
                peers[key[len(REPLICA_PREFIX) :]] = name.decode()
        self.peers = peers
        return sorted({self.replica, *(key[len(REPLICA_PREFIX) :] for key in entries)})

    async def find_dead(self) -> set[str]:
        """Probe the live peers once; evict those now confirmed dead (their heartbeat and the leases holding their
        name, each at the revision read) and return them: the caller ticks at once to take the freed partitions."""
        if self.probe is None or not self.peers:
            return set()
        peers = dict(self.peers)
        answers = await asyncio.gather(*(self.probe(name) for name in peers.values()))
        self.misses, dead = count_misses(self.misses, dict(zip(peers, answers, strict=True)), self.confirm)
        for peer in sorted(dead):
            log.warning("bus.partitions.peer_dead", bucket=self.bucket, peer=peers[peer], misses=self.misses[peer])
            await self._evict(peer)  # raises when the bucket does not answer: the next round tries again
            self.peers.pop(peer, None)
            self.live_seen = [name for name in self.live_seen if name != peer]
            self.misses.pop(peer, None)
        return dead

    async def _evict(self, peer: str) -> None:
        """Delete the peer's heartbeat and its leases. The bucket not answering (its leader electing) ends the
        eviction at the first call — raised, so the peer stays counted dead and the next probe round tries again —
        rather than waiting a second per partition while our own leases go unrenewed."""
        await self._op(self.kv.delete(f"{REPLICA_PREFIX}{peer}"))
        for partition in range(self.partitions):
            if partition in self.owned:
                continue
            # free already, or taken meanwhile (the delete at the revision read refuses then)
            with contextlib.suppress(KeyNotFoundError, BadRequestError):
                entry = await self._op(self.kv.get(f"p.{partition}"))
                if entry.value == peer.encode():
                    await self._op(self.kv.delete(f"p.{partition}", last=entry.revision))

    async def tick(
        self, before_release: Release | None = None, busy: frozenset[int] = frozenset()
    ) -> tuple[set[int], set[int]]:
        """Renew, rebalance and acquire; returns (partitions gained, partitions lost) in this tick.

        `before_release(partitions)` runs before surplus partitions are given back (the allocator finishes the
        work it took from them first, so the next owner does not redo it). Surplus partitions are the idle ones
        first, `busy` ones last (`eru.bus.balance.surplus`).
        """
        gained: set[int] = set()
        lost: set[int] = set()
        await self._op(self.kv.put(self._heartbeat_key, self.name.encode()))
        for partition, revision in list(self.owned.items()):
            try:
                self.owned[partition] = await self._op(
                    self.kv.update(f"p.{partition}", self.replica.encode(), last=revision)
                )
            except (KeyWrongLastSequenceError, KeyNotFoundError):
                # expired with nobody taking it, or our last renewal stored with its answer lost: still ours, and
                # owned while it is taken back in place (its keys' work goes on: a late renewal under load had the
                # eviction service skip its own nodes' samples for that moment)
                kept = False
                with contextlib.suppress(Exception):  # unsure (the bucket away again): let it go, take it later
                    kept = await self._take(partition)
                if not kept:
                    self.owned.pop(partition, None)
                    lost.add(partition)
        try:
            live = self.live_seen = await self.live_replicas()
        except Exception as error:  # the bucket's stream (or JetStream's meta leader) may be electing: go on with
            # the replicas seen last (less any evicted since); the renewals above went through already
            log.info("bus.partitions.listing_failed", bucket=self.bucket, error=str(error) or type(error).__name__)
            live = sorted({self.replica, *self.live_seen})
        fair = fair_share(self.partitions, len(live))
        extra = surplus(self.owned, fair, busy)
        if extra:
            if before_release is not None:
                await before_release(extra)
            for partition in extra:
                await self._give_back(partition)
            lost |= extra
        for partition in range(self.partitions):
            if len(self.owned) >= fair:
                break
            if partition not in self.owned and await self._take(partition):
                gained.add(partition)
        if gained or lost:
            log.info(
                "bus.partitions", bucket=self.bucket, owned=sorted(self.owned), gained=sorted(gained), lost=sorted(lost)
            )
        return gained, lost

    async def _take(self, partition: int) -> bool:
        key = f"p.{partition}"
        try:
            self.owned[partition] = await self._op(self.kv.create(key, self.replica.encode()))
            return True
        except KeyWrongLastSequenceError:
            pass
        except KeyNotFoundError:  # nats-py's create read the key to see if it was deleted: it expired meanwhile
            return False  # free now: the next tick takes it
        # Held: by another replica, or by this one before a restart under the same name (take it back at once).
        with contextlib.suppress(KeyNotFoundError, KeyWrongLastSequenceError):
            entry = await self._op(self.kv.get(key))
            if entry.value == self.replica.encode():
                self.owned[partition] = await self._op(self.kv.update(key, self.replica.encode(), last=entry.revision))
                return True
        return False

    async def _give_back(self, partition: int) -> None:
        revision = self.owned.pop(partition)
        with contextlib.suppress(Exception):
            await self._op(self.kv.delete(f"p.{partition}", last=revision))

    async def transfer(self, partition: int, peer: str) -> bool:
        """Hand the lease of `partition` over to the replica `peer` (its token): the lease's value becomes the peer's
        name at the revision we hold, so nobody else can take it meanwhile; the peer `adopt`s it. False when the
        lease was not ours any more (it is dropped then, as a failed renewal drops it)."""
        revision = self.owned.pop(partition)
        try:
            await self._op(self.kv.update(f"p.{partition}", peer.encode(), last=revision))
        except (KeyWrongLastSequenceError, KeyNotFoundError):
            return False
        return True

    async def adopt(self, partition: int) -> bool:
        """Take a lease a peer handed over (`transfer`): renew it when it names this replica. False when it does
        not (any more): expired and taken meanwhile, or never handed."""
        if partition in self.owned:
            return False
        with contextlib.suppress(KeyNotFoundError, KeyWrongLastSequenceError):
            entry = await self._op(self.kv.get(f"p.{partition}"))
            if entry.value == self.replica.encode():
                self.owned[partition] = await self._op(
                    self.kv.update(f"p.{partition}", self.replica.encode(), last=entry.revision)
                )
                return True
        return False

    async def release_all(self, before_release: Release | None = None) -> None:
        """Give every lease back (clean stop) so other replicas take over at once."""
        if before_release is not None and self.owned:
            await before_release(set(self.owned))
        for partition in list(self.owned):
            await self._give_back(partition)
        with contextlib.suppress(Exception):
            await self._op(self.kv.delete(self._heartbeat_key))
