"""Which replica watches which node: nodes hash into partitions, replicas hold partitions by lease in the NATS KV
bucket `eru_eviction_leases` (`eru.bus.leases`, docs/replicas.md: heartbeats, fair share, takeover within one TTL).
"""

from __future__ import annotations

from nats.js import JetStreamContext

from eru.bus.leases import PartitionLeases as _Leases
from eru.bus.leases import partition_of

BUCKET = "eru_eviction_leases"

__all__ = ["BUCKET", "PartitionLeases", "partition_of"]


class PartitionLeases(_Leases):
    """The eviction service's node leases (bucket `eru_eviction_leases`)."""

    def __init__(
        self, js: JetStreamContext, replica: str, partitions: int, ttl_seconds: float, copies: int = 1
    ) -> None:
        super().__init__(js, BUCKET, replica, partitions, ttl_seconds, copies)
