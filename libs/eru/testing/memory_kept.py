"""The kept instances capability (`eru.store.kept.KeptInstanceStore`) in memory, mixed into `InMemoryStore`
(eru.testing.memory_store): the same answers as PostgreSQL's `PgKeptInstances` (the contract suite,
tests/integration/store/test_kept_contract.py, runs both). A round holds the keeper's lock (a second round while one
is open gets None, as `pg_try_advisory_xact_lock` answers) and works on a copy of the kept rows: applied when the
block ends normally, dropped when it raises. It reads containers' reasons and last changes from the container events
capability (`MemoryContainerEvents`), and keeps the container ids already recorded as evictions beside the store's
`evictions`.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from eru.colocation.backoff import Eviction
from eru.domain import DeployRequest
from eru.store.kept import DueInstance, GoneInstance, KeeperRound, KeptInstanceStore, PlacingInstance
from eru.store.protocol import OutboxMessage
from eru.testing.memory_containers import MemoryContainerEvents

GONE = frozenset({"removed", "failed", "lost"})
DUE_LIMIT = 100


@dataclass
class KeptRow:
    """A `kept_instances` row: one logical instance of a `keep` deploy."""

    lineage: str
    deploy_id: str
    pod: str
    workload: str
    container_id: str | None
    state: str
    request_id: str | None = None
    evictions: list[float] = field(default_factory=list)
    generation: int = 0
    due_at: float | None = None


@dataclass
class MemoryKeptState:
    """What the kept instances capability keeps: its rows by lineage, the container ids recorded as evictions, and
    the keeper's lock."""

    rows: dict[str, KeptRow] = field(default_factory=dict)
    evicted: set[str] = field(default_factory=set)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class MemoryKeeperRound:
    """A round over the store (see the module doc): its rows a copy until the block ends normally."""

    def __init__(self, store: MemoryKept) -> None:
        self.store = store
        self.rows = copy.deepcopy(store.kept_state.rows)
        self.evicted: list[tuple[str, Eviction]] = []
        self.messages: list[OutboxMessage] = []

    @property
    def now(self) -> float:
        """The store's clock."""
        return self.store.now

    async def record_evictions(self, mark: str, within_seconds: float) -> None:
        """Batch containers removed with `mark` in their reason within `within_seconds`, each recorded once."""
        store, events = self.store, self.store.event_state
        seen = store.kept_state.evicted | {cid for cid, _ in self.evicted}
        lineage_of = {row.container_id: row.lineage for row in self.rows.values() if row.container_id is not None}
        for row in store.containers.values():
            at = events.updated_at.get(row.id, 0.0)
            reason = events.reasons.get(row.id) or ""
            if (
                row.priority_class == "batch"
                and row.state == "removed"
                and mark in reason
                and at > store.now - within_seconds
                and row.id not in seen
            ):
                self.evicted.append((row.id, Eviction(row.workload, lineage_of.get(row.id, row.id), row.node, at)))

    async def adopt(self) -> None:
        """Every first instance of a `keep` deploy not kept yet, kept as `running`."""
        kept_containers = {row.container_id for row in self.rows.values()}
        for row in self.store.containers.values():
            deploy = self.store.deploys.get(row.deploy_id)
            if deploy is None or row.replaces is not None or row.id in kept_containers:
                continue
            if json.loads(deploy.request or "{}").get("keep") is True and row.id not in self.rows:
                self.rows[row.id] = KeptRow(row.id, row.deploy_id, row.pod, row.workload, row.id, "running")

    async def gone(self) -> list[GoneInstance]:
        """Running kept instances whose container is removed, failed or lost (by lineage)."""
        events, found = self.store.event_state, []
        for row in sorted(self.rows.values(), key=lambda r: r.lineage):
            container = self.store.containers.get(row.container_id or "")
            if row.state == "running" and container is not None and container.state in GONE:
                found.append(
                    GoneInstance(
                        row.lineage,
                        row.deploy_id,
                        row.workload,
                        list(row.evictions),
                        container.id,
                        container.state,
                        events.reasons.get(container.id),
                        events.updated_at.get(container.id, 0.0),
                    )
                )
        return found

    async def due(self, now: float) -> list[DueInstance]:
        """Waiting kept instances due by `now`, soonest first, up to 100."""
        waiting = [r for r in self.rows.values() if r.state == "waiting" and r.due_at is not None and r.due_at <= now]
        waiting.sort(key=lambda r: r.due_at or 0.0)
        return [
            DueInstance(
                row.lineage,
                row.deploy_id,
                list(row.evictions),
                row.generation,
                DeployRequest.model_validate_json(self.store.deploys[row.deploy_id].request),
            )
            for row in waiting[:DUE_LIMIT]
        ]

    async def placing(self) -> list[PlacingInstance]:
        """Kept instances being placed, with their request's deploy status and first container (by lineage)."""
        found = []
        for row in sorted(self.rows.values(), key=lambda r: r.lineage):
            if row.state != "placing":
                continue
            deploy = next((d for d in self.store.deploys.values() if d.request_id == row.request_id), None)
            first = None
            if deploy is not None:
                first = next((c.id for c in self.store.containers.values() if c.deploy_id == deploy.id), None)
            status = deploy.status if deploy is not None else None
            found.append(
                PlacingInstance(row.lineage, row.deploy_id, row.request_id, list(row.evictions), status, first)
            )
        return found

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
        """The kept instance moved on (an unknown lineage: nothing)."""
        row = self.rows.get(lineage)
        if row is None:
            return
        row.state, row.due_at, row.evictions = state, due_at, list(evictions)
        row.container_id = container_id if container_id is not None else row.container_id
        row.request_id = request_id if request_id is not None else row.request_id
        row.generation += int(next_generation)

    async def queue(self, messages: Sequence[OutboxMessage]) -> None:
        """The round's messages, for the outbox at commit."""
        self.messages += messages

    def commit(self) -> None:
        """Apply the round to the store."""
        state = self.store.kept_state
        state.rows = self.rows
        for container_id, eviction in self.evicted:
            state.evicted.add(container_id)
            self.store.evictions.append(eviction)
        known = {message.envelope.id for message in self.store.outbox}
        for message in self.messages:
            if message.envelope.id not in known:
                known.add(message.envelope.id)
                self.store.outbox.append(message)


class MemoryKept(MemoryContainerEvents):
    """`KeptInstanceStore` over the store's containers, deploys, evictions and outbox (see the module doc)."""

    evictions: list[Eviction]

    @property
    def kept_state(self) -> MemoryKeptState:
        """The capability's own state, made on first use."""
        state = self.__dict__.get("_kept_state")
        if state is None:
            state = self.__dict__["_kept_state"] = MemoryKeptState()
        assert isinstance(state, MemoryKeptState)
        return state

    @asynccontextmanager
    async def keeper_round(self) -> AsyncIterator[MemoryKeeperRound | None]:
        """A round under the keeper's lock (None while another round holds it), applied on a normal end."""
        lock = self.kept_state.lock
        if lock.locked():
            yield None
            return
        async with lock:
            kept = MemoryKeeperRound(self)
            yield kept
            kept.commit()


def _conforms(store: MemoryKept, round_: MemoryKeeperRound) -> tuple[KeptInstanceStore, KeeperRound]:
    """Where mypy checks that these are a `KeptInstanceStore` and a `KeeperRound`."""
    return store, round_
