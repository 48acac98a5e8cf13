"""Partitions of a service's work and the leases that give each partition to one replica (docs/replicas.md).

Work is split into a fixed number of partitions by a stable hash of its key (`partition_of`: CRC-32 of the key
modulo the partition count, the same in every process and on every machine). Replicas hold partitions by lease in a
NATS KV bucket whose max age is the lease TTL, so an entry that is not renewed disappears:

* `replicas.<replica>`: a replica's heartbeat, put every tick;
* `p.<n>`: the lease of partition n, its value the owning replica; created only if absent (`create`), renewed only
  by its owner (`update` with the last revision), deleted on a clean stop or when given back.

Every tick (a third of the TTL) a replica renews its leases, counts the live replicas, gives back the partitions
above its fair share, ceil(partitions / replicas), and takes free ones up to it. A replica killed with SIGKILL stops
renewing: its entries expire within one TTL and the others take its partitions at their next tick, so the takeover
takes at most TTL + TTL/3 (5 s + 1.7 s with the allocator's defaults).

A lease is what makes the work *efficient*, not what makes it *correct*: for a moment after a lease moves two
replicas may both believe they own a partition (the old one notices at its next tick). Every service that uses these
leases stays correct without them (the allocator's pod lock and request keys, the eviction budget claims).
"""

from __future__ import annotations

import contextlib
import math
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from nats.js import api
from nats.js.errors import BadRequestError, KeyNotFoundError, KeyWrongLastSequenceError, NoKeysError

from eru.bus.subjects import token

log = structlog.get_logger()

REPLICA_PREFIX = "replicas."
LEASE_BYTES = 1024 * 1024

Release = Callable[[set[int]], Awaitable[None]]


def partition_of(key: str, partitions: int) -> int:
    """The partition of `key`: CRC-32 of its UTF-8 bytes modulo the partition count (stable across processes).

    >>> partition_of("default", 16)
    15
    """
    return zlib.crc32(key.encode()) % partitions


def fair_share(partitions: int, replicas: int) -> int:
    """How many partitions one replica holds at most: ceil(partitions / live replicas), e.g. 16 over 3 → 6."""
    return math.ceil(partitions / max(1, replicas))


class PartitionLeases:
    """One replica's partition leases in the KV bucket `bucket`; `tick()` every third of the TTL keeps them and
    rebalances."""

    def __init__(
        self, js: Any, bucket: str, replica: str, partitions: int, ttl_seconds: float, copies: int = 1
    ) -> None:
        self.js = js
        self.copies = copies  # servers holding the bucket (a NATS cluster: `bus.stream_replicas`)
        self.bucket = bucket
        self.replica = token(replica.replace(".", "-"), "replica")
        self.partitions = partitions
        self.ttl_seconds = ttl_seconds
        self.owned: dict[int, int] = {}  # partition -> revision of our lease
        self.kv: Any = None

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
            self.kv = await self.js.create_key_value(config=config)
        except BadRequestError:
            self.kv = await self.js.key_value(self.bucket)

    def owns(self, key: str) -> bool:
        """True when this replica holds the partition of `key` now."""
        return partition_of(key, self.partitions) in self.owned

    async def live_replicas(self) -> list[str]:
        """The replicas whose heartbeat has not expired, sorted."""
        try:
            keys = await self.kv.keys()
        except NoKeysError:
            return [self.replica]
        live = sorted(key[len(REPLICA_PREFIX) :] for key in keys if key.startswith(REPLICA_PREFIX))
        return live or [self.replica]

    async def tick(self, before_release: Release | None = None) -> tuple[set[int], set[int]]:
        """Renew, rebalance and acquire; returns (partitions gained, partitions lost) in this tick.

        `before_release(partitions)` runs before surplus partitions are given back (the allocator finishes the
        work it took from them first, so the next owner does not redo it).
        """
        gained: set[int] = set()
        lost: set[int] = set()
        await self.kv.put(f"{REPLICA_PREFIX}{self.replica}", b"alive")
        for partition, revision in list(self.owned.items()):
            try:
                self.owned[partition] = await self.kv.update(f"p.{partition}", self.replica.encode(), last=revision)
            except (KeyWrongLastSequenceError, KeyNotFoundError):
                del self.owned[partition]
                lost.add(partition)
        fair = fair_share(self.partitions, len(await self.live_replicas()))
        surplus = set(sorted(self.owned, reverse=True)[: max(0, len(self.owned) - fair)])
        if surplus:
            if before_release is not None:
                await before_release(surplus)
            for partition in surplus:
                await self._give_back(partition)
            lost |= surplus
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
            self.owned[partition] = await self.kv.create(key, self.replica.encode())
            return True
        except KeyWrongLastSequenceError:
            pass
        # Held: by another replica, or by this one before a restart under the same name (take it back at once).
        with contextlib.suppress(KeyNotFoundError, KeyWrongLastSequenceError):
            entry = await self.kv.get(key)
            if entry.value == self.replica.encode():
                self.owned[partition] = await self.kv.update(key, self.replica.encode(), last=entry.revision)
                return True
        return False

    async def _give_back(self, partition: int) -> None:
        revision = self.owned.pop(partition)
        with contextlib.suppress(Exception):
            await self.kv.delete(f"p.{partition}", last=revision)

    async def release_all(self, before_release: Release | None = None) -> None:
        """Give every lease back (clean stop) so other replicas take over at once."""
        if before_release is not None and self.owned:
            await before_release(set(self.owned))
        for partition in list(self.owned):
            await self._give_back(partition)
        with contextlib.suppress(Exception):
            await self.kv.delete(f"{REPLICA_PREFIX}{self.replica}")
