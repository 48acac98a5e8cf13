"""Which replica watches which node: nodes hash into partitions, replicas hold partitions by lease in a NATS KV bucket.

Keys of bucket `eru_eviction_leases` (its max age is the lease TTL, so an entry not renewed disappears):

* `replicas.<replica>`: a replica's heartbeat (put every tick);
* `p.<n>`: the lease of partition n, its value the owning replica; created only if absent (`create`), renewed only
  by its owner (`update` with the last revision), released on a clean stop (`delete`).

Every tick a replica renews its leases, counts the live replicas, gives back partitions above its fair share
(ceil(partitions / replicas)) and takes free ones up to it. A dead replica stops renewing: its leases expire within
one TTL and the others take them over.
"""

from __future__ import annotations

import contextlib
import math
import zlib
from typing import Any

import structlog
from nats.js import api
from nats.js.errors import BadRequestError, KeyNotFoundError, KeyWrongLastSequenceError, NoKeysError

from eru.bus.subjects import token

log = structlog.get_logger()

BUCKET = "eru_eviction_leases"
REPLICA_PREFIX = "replicas."


def partition_of(node: str, partitions: int) -> int:
    """The partition of a node: CRC-32 of its name modulo the partition count (stable across processes)."""
    return zlib.crc32(node.encode()) % partitions


class PartitionLeases:
    """This replica's partition leases; `tick()` every third of the TTL keeps them and rebalances."""

    def __init__(self, js: Any, replica: str, partitions: int, ttl_seconds: float) -> None:
        self.js = js
        self.replica = token(replica.replace(".", "-"), "replica")
        self.partitions = partitions
        self.ttl_seconds = ttl_seconds
        self.owned: dict[int, int] = {}  # partition -> revision of our lease
        self.kv: Any = None

    async def start(self) -> None:
        """Create (or open) the lease bucket."""
        config = api.KeyValueConfig(bucket=BUCKET, history=1, ttl=self.ttl_seconds, storage=api.StorageType.MEMORY)
        try:
            self.kv = await self.js.create_key_value(config=config)
        except BadRequestError:
            self.kv = await self.js.key_value(BUCKET)

    def owns(self, node: str) -> bool:
        """True when this replica watches `node` now."""
        return partition_of(node, self.partitions) in self.owned

    async def _live_replicas(self) -> int:
        try:
            keys = await self.kv.keys()
        except NoKeysError:
            return 1
        return max(1, sum(1 for key in keys if key.startswith(REPLICA_PREFIX)))

    async def tick(self) -> tuple[set[int], set[int]]:
        """Renew, rebalance and acquire; returns (partitions gained, partitions lost) in this tick."""
        gained: set[int] = set()
        lost: set[int] = set()
        await self.kv.put(f"{REPLICA_PREFIX}{self.replica}", b"alive")
        for partition, revision in list(self.owned.items()):
            try:
                self.owned[partition] = await self.kv.update(f"p.{partition}", self.replica.encode(), last=revision)
            except (KeyWrongLastSequenceError, KeyNotFoundError):
                del self.owned[partition]
                lost.add(partition)
        fair = math.ceil(self.partitions / await self._live_replicas())
        for partition in sorted(self.owned, reverse=True)[: max(0, len(self.owned) - fair)]:
            await self._give_back(partition)
            lost.add(partition)
        for partition in range(self.partitions):
            if len(self.owned) >= fair:
                break
            if partition in self.owned:
                continue
            with contextlib.suppress(KeyWrongLastSequenceError):
                self.owned[partition] = await self.kv.create(f"p.{partition}", self.replica.encode())
                gained.add(partition)
        if gained or lost:
            log.info("eviction.partitions", owned=sorted(self.owned), gained=sorted(gained), lost=sorted(lost))
        return gained, lost

    async def _give_back(self, partition: int) -> None:
        revision = self.owned.pop(partition)
        with contextlib.suppress(Exception):
            await self.kv.delete(f"p.{partition}", last=revision)

    async def release_all(self) -> None:
        """Give every lease back (clean stop) so other replicas take over at once."""
        for partition in list(self.owned):
            await self._give_back(partition)
        with contextlib.suppress(Exception):
            await self.kv.delete(f"{REPLICA_PREFIX}{self.replica}")
