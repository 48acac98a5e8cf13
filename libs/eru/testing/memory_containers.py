"""The container events capability (`eru.store.container_events.ContainerEventStore`) in memory, mixed into
`InMemoryStore` (eru.testing.memory_store): the same answers as PostgreSQL's `PgContainerEvents` (the contract suite,
tests/integration/store/test_container_events_contract.py, runs both).

A batch holds one lock for its block (PostgreSQL locks the rows it touches); its inbox marks and writes are applied
when the block ends normally and dropped when it raises, as a transaction is. What the deploy path's `ContainerRow`
does not carry (a row's reason and previous allocation, when it last changed) and the nodes' last heartbeats are kept
beside it (`MemoryEventState`). The store's clock is `now` (seconds): a row no event changed counts as changed at 0,
a node without a heartbeat (`heartbeat`) is never silent.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Protocol

from eru.planning import NodeResources
from eru.store.container_events import (
    ContainerEventStore,
    EventBatchWrite,
    EventMember,
    EventRow,
    HealthReport,
    OpenedEventBatch,
    OverdueContainer,
    SilentContainer,
)
from eru.store.protocol import ContainerRow, DeployRow, OutboxMessage, Usage

PENDING = ("planned", "creating")
ACKNOWLEDGED = ("running", "paused", "updating", "stopping")
LIMIT = 1000
LIVE_HEALTH = PENDING + ACKNOWLEDGED
"""The states whose containers take a health report (PostgreSQL's `HEALTH_SQL`)."""


@dataclass
class MemoryEventState:
    """What the events capability keeps beside the deploy path's rows."""

    inbox: dict[str, set[str]] = field(default_factory=dict)
    """Consumer → the message ids it has seen."""
    reasons: dict[str, str | None] = field(default_factory=dict)
    previous_allocations: dict[str, str | None] = field(default_factory=dict)
    updated_at: dict[str, float] = field(default_factory=dict)
    heartbeats: dict[str, float] = field(default_factory=dict)
    """Node → the time of its last heartbeat."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    health: dict[str, str] = field(default_factory=dict)
    """Container → the health its node last reported."""


class _Node(Protocol):
    """The part of `MemoryNode` this capability charges."""

    resources: NodeResources


def charged(node: NodeResources, usage: Usage) -> NodeResources:
    """`node` with `usage` added to what it uses (negative amounts give back)."""
    cpu = dict(node.used_cpu_map)
    numa = dict(node.used_numa_memory)
    for core, pieces in usage.cpu_map.items():
        cpu[core] = cpu.get(core, 0) + pieces
    for numa_id, amount in usage.numa_memory.items():
        numa[numa_id] = numa.get(numa_id, 0) + amount
    return replace(node, used_cpu_map=cpu, used_memory=node.used_memory + usage.memory, used_numa_memory=numa)


class MemoryEventBatch:
    """An open batch over the store: what it read, and what the block wrote (applied when the block ends normally)."""

    def __init__(self, opened: OpenedEventBatch, outbox: Sequence[OutboxMessage]) -> None:
        self._opened = opened
        self._known = {message.envelope.id for message in outbox}
        self.writes: list[EventBatchWrite] = []

    @property
    def opened(self) -> OpenedEventBatch:
        """What opening the batch read."""
        return self._opened

    async def write(self, changes: EventBatchWrite) -> set[str]:
        """Keep `changes` for the commit; the outbox ids not there before (a repeat's are not)."""
        self.writes.append(changes)
        queued = {message.envelope.id for message in changes.messages} - self._known
        self._known |= queued
        return queued


class MemoryContainerEvents:
    """`ContainerEventStore` over the store's `containers`, `deploys`, `nodes` and `outbox` (see the module doc)."""

    now: float
    containers: dict[str, ContainerRow]
    deploys: dict[str, DeployRow]
    nodes: Mapping[str, _Node]
    outbox: list[OutboxMessage]

    @property
    def event_state(self) -> MemoryEventState:
        """The capability's own state, made on first use."""
        state = self.__dict__.get("_event_state")
        if state is None:
            state = self.__dict__["_event_state"] = MemoryEventState()
        assert isinstance(state, MemoryEventState)
        return state

    def heartbeat(self, node: str, at: float | None = None) -> None:
        """Node `node` sent a heartbeat at `at` (default: now)."""
        self.event_state.heartbeats[node] = self.now if at is None else at

    def event_row(self, container_id: str) -> EventRow:
        """Container `container_id`'s row as the state machine reads it."""
        row, state = self.containers[container_id], self.event_state
        return EventRow(
            row.id,
            row.deploy_id,
            row.node,
            row.state,
            state.reasons.get(row.id),
            row.allocation,
            state.previous_allocations.get(row.id),
            row.resources,
            row.replaces,
            row.tenant,
        )

    @asynccontextmanager
    async def event_batch(
        self, inbox: str, messages: Sequence[str], containers: Sequence[tuple[str, str]]
    ) -> AsyncIterator[MemoryEventBatch]:
        """Read what the fresh messages touch under the batch lock; apply marks and writes on a normal end."""
        state = self.event_state
        async with state.lock:
            fresh = set(messages) - state.inbox.get(inbox, set())
            session = MemoryEventBatch(self._open_events(fresh, {c for c, m in containers if m in fresh}), self.outbox)
            yield session
            state.inbox.setdefault(inbox, set()).update(fresh)
            for changes in session.writes:
                self._write_events(changes)

    def _open_events(self, fresh: set[str], ids: set[str]) -> OpenedEventBatch:
        opened = OpenedEventBatch(fresh=set(fresh))
        if not ids:
            return opened
        touched = [
            row for row in self.containers.values() if row.id in ids or (row.replaces in ids and row.state in PENDING)
        ]
        for deploy_id in sorted({row.deploy_id for row in touched if row.deploy_id is not None}):
            deploy = self.deploys.get(deploy_id)
            if deploy is not None:
                opened.deploy_states[deploy_id] = deploy.status
                opened.placements[deploy_id] = json.loads(deploy.result or "{}").get("placements")
        replaced = {row.replaces for row in touched if row.replaces is not None and row.replaces not in ids}
        for row in [*touched, *(self.containers[r] for r in sorted(replaced) if r in self.containers)]:
            opened.rows[row.id] = self.event_row(row.id)
        planned = {d for d, status in opened.deploy_states.items() if status == "planned"}
        opened.members = [
            EventMember(row.id, row.deploy_id, row.state, self.event_state.reasons.get(row.id))
            for row in self.containers.values()
            if row.deploy_id in planned and row.replaces is None
        ]
        return opened

    def _write_events(self, changes: EventBatchWrite) -> None:
        state = self.event_state
        for row in changes.moved:
            self.containers[row.id] = self.containers[row.id]._replace(state=row.state)
            state.reasons[row.id] = row.reason
            state.updated_at[row.id] = self.now
        for row in changes.reshaped:
            self.containers[row.id] = self.containers[row.id]._replace(
                state=row.state, allocation=row.allocation, resources=row.resources, replaces=row.replaces
            )
            state.reasons[row.id] = row.reason
            state.previous_allocations[row.id] = row.previous_allocation
            state.updated_at[row.id] = self.now
        for finished in changes.finished:
            deploy = self.deploys[finished.id]
            result = {**json.loads(deploy.result or "{}"), **json.loads(finished.summary)}
            self.deploys[finished.id] = deploy._replace(status=finished.status, result=json.dumps(result))
        known = {message.envelope.id for message in self.outbox}
        for message in changes.messages:
            if message.envelope.id not in known:
                known.add(message.envelope.id)
                self.outbox.append(message)
        for name in sorted(changes.usage):
            node = self.nodes[name]
            node.resources = charged(node.resources, changes.usage[name])

    async def overdue(self, timeout_seconds: float) -> list[OverdueContainer]:
        """Containers planned or creating (not pending replacements) unchanged for `timeout_seconds`, by id."""
        updated = self.event_state.updated_at
        found = [
            OverdueContainer(row.id, row.node, row.deploy_id)
            for row in self.containers.values()
            if row.state in PENDING and row.replaces is None and updated.get(row.id, 0.0) < self.now - timeout_seconds
        ]
        return sorted(found, key=lambda row: row.id)[:LIMIT]

    async def on_silent_nodes(self, ttl_seconds: float) -> list[SilentContainer]:
        """Live, acknowledged containers of nodes without a heartbeat for `ttl_seconds`, by id."""
        beats = self.event_state.heartbeats
        found = [
            SilentContainer(row.id, row.node, row.deploy_id, self.now - beats[row.node])
            for row in self.containers.values()
            if row.node in beats
            and beats[row.node] <= self.now - ttl_seconds
            and row.state in ACKNOWLEDGED
            and row.replaces is None
        ]
        return sorted(found, key=lambda row: row.id)[:LIMIT]

    async def record_health(self, reports: Sequence[HealthReport]) -> None:
        """Each report onto its live container on the node that reported it."""
        for report in reports:
            row = self.containers.get(report.container_id)
            if row is not None and row.node == report.node and row.state in LIVE_HEALTH:
                self.event_state.health[row.id] = report.health


def _conforms(store: MemoryContainerEvents) -> ContainerEventStore:
    """Where mypy checks that `MemoryContainerEvents` is a `ContainerEventStore`."""
    return store
