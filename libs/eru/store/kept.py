"""The kept instances capability of the allocator's store (docs/store.md "Capabilities"; docs/colocation.md, the
keeper of `eru_allocator.containers.keep_count`): each round of the keeper is one transaction under the keeper's lock
(None when another replica holds it): evictions recorded, instances of `keep` deploys adopted, and the instances gone,
due for a replacement or being placed, each read locked and moved on, with the round's events queued in the outbox.
Implemented by PostgreSQL (`eru_allocator.store.kept_store.PgKeptInstances`) and in memory
(`eru.testing.memory_kept`); the contract suite (tests/integration/store/test_kept_contract.py) runs both. A round
whose block raises leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from eru.domain import DeployRequest
from eru.store.protocol import OutboxMessage


@dataclass(frozen=True)
class GoneInstance:
    """A kept instance whose container is gone: removed (maybe evicted), failed or lost, and when (epoch seconds)."""

    lineage: str
    deploy_id: str
    workload: str
    evictions: list[float]
    container_id: str
    state: str
    reason: str | None
    at: float


@dataclass(frozen=True)
class DueInstance:
    """A kept instance waiting for its replacement, due now: its deploy's request and how many it had."""

    lineage: str
    deploy_id: str
    evictions: list[float]
    generation: int
    request: DeployRequest


@dataclass(frozen=True)
class PlacingInstance:
    """A kept instance whose replacement was requested: that request's deploy status and first container, if any."""

    lineage: str
    deploy_id: str
    request_id: str | None
    evictions: list[float]
    status: str | None
    container_id: str | None


class KeeperRound(Protocol):
    """One round of the keeper (a transaction holding the keeper's lock)."""

    @property
    def now(self) -> float:
        """The round's time (epoch seconds; PostgreSQL: the transaction's)."""

    async def record_evictions(self, mark: str, within_seconds: float) -> None:
        """Record the batch containers removed with `mark` in their reason within `within_seconds` as evictions (each
        once, with its lineage: its kept instance's, else its own id)."""

    async def adopt(self) -> None:
        """Keep every first instance (not a replacement) of a `keep` deploy not kept yet, as `running`."""

    async def gone(self) -> list[GoneInstance]:
        """Running kept instances whose container is removed, failed or lost."""

    async def due(self, now: float) -> list[DueInstance]:
        """Up to 100 waiting kept instances due by `now`, soonest first."""

    async def placing(self) -> list[PlacingInstance]:
        """Kept instances whose replacement was requested, with that request's deploy status and first container."""

    async def move(
        self,
        lineage: str,
        state: str,
        due_at: float | None,
        evictions: Sequence[float],
        *,
        container_id: str | None = None,
        request_id: str | None = None,
        next_generation: bool = False,
    ) -> None:
        """Move a kept instance to `state` (due at `due_at`) with its evictions; a new container or request id when
        given; one generation further when `next_generation`."""

    async def queue(self, messages: Sequence[OutboxMessage]) -> None:
        """Queue the round's messages in the outbox (published once the round commits)."""


class KeptInstanceStore(Protocol):
    """The keeper's rounds (see the module doc)."""

    def keeper_round(self) -> AbstractAsyncContextManager[KeeperRound | None]:
        """A round under the keeper's lock, None when another replica holds it; committed when the block ends
        normally."""


__all__ = ["DueInstance", "GoneInstance", "KeeperRound", "KeptInstanceStore", "PlacingInstance"]
