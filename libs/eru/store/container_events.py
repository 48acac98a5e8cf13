"""The container events capability of the allocator's store (docs/store.md "Capabilities"): node agents' container
events applied in batches, the containers no node agent answered for in time, and the live containers of silent
nodes. Implemented by PostgreSQL (`eru_allocator.store.container_store.PgContainerEvents`) and in memory
(`eru.testing.memory_containers`); the contract suite (tests/integration/store/test_container_events_contract.py)
runs the same cases against both.

A batch is one transaction: `event_batch` marks the batch's messages in the consumer's inbox (a message seen before
is not fresh: its events are not applied again), locks and reads what the fresh messages touch, and the block writes
what the state machine changed with `EventBatchSession.write`. A block that raises leaves nothing behind, inbox
marks included, as a transaction rolls back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from eru.store.protocol import OutboxMessage, Usage


@dataclass
class EventRow:
    """A container's row as the state machine reads and changes it (the batch's working copy): JSON columns as JSON
    text, as they are stored."""

    id: str
    deploy_id: str | None
    node: str
    state: str
    reason: str | None
    allocation: str
    previous_allocation: str | None
    resources: str
    replaces: str | None
    tenant: str


@dataclass(frozen=True)
class EventMember:
    """A container of a deploy still planned (not a pending replacement), as read before the batch."""

    id: str
    deploy_id: str
    state: str
    reason: str | None


@dataclass
class OpenedEventBatch:
    """What opening an events batch read: the messages not seen before (`fresh`), the status and placements (the
    decoded `result.placements`, None when none) of each deploy touched, the rows of the containers touched with
    their pending replacements and the containers these replace, and the members of the deploys still planned."""

    fresh: set[str] = field(default_factory=set)
    deploy_states: dict[str, str] = field(default_factory=dict)
    placements: dict[str, Any] = field(default_factory=dict)
    rows: dict[str, EventRow] = field(default_factory=dict)
    members: list[EventMember] = field(default_factory=list)


@dataclass(frozen=True)
class FinishedDeploy:
    """A deploy whose containers have all reported: its terminal status and the summary (JSON object text) merged
    into its result."""

    id: str
    status: str
    summary: str


@dataclass
class EventBatchWrite:
    """What a batch changed: rows whose state (and reason) moved, rows reshaped (allocation, previous allocation,
    resources, replaces too), finished deploys, outbox messages (held `hold` seconds for the committing process's
    publisher, None: for the relays), and the resources added back to each node (negative: given back)."""

    moved: Sequence[EventRow] = ()
    reshaped: Sequence[EventRow] = ()
    finished: Sequence[FinishedDeploy] = ()
    messages: Sequence[OutboxMessage] = ()
    hold: float | None = None
    usage: Mapping[str, Usage] = field(default_factory=dict)


@dataclass(frozen=True)
class OverdueContainer:
    """A container still planned or creating that no node agent answered for in time."""

    id: str
    node: str
    deploy_id: str | None


@dataclass(frozen=True)
class SilentContainer:
    """A live container on a node whose heartbeats stopped, and for how long they have."""

    id: str
    node: str
    deploy_id: str | None
    silent_seconds: float


@dataclass(frozen=True)
class HealthReport:
    """A container's health as its node reported it (starting, healthy, unhealthy)."""

    container_id: str
    node: str
    health: str


class EventBatchSession(Protocol):
    """One open events batch (a transaction holding its locks)."""

    @property
    def opened(self) -> OpenedEventBatch:
        """What opening the batch read."""

    async def write(self, changes: EventBatchWrite) -> set[str]:
        """Write what the batch changed; the event ids of the outbox messages inserted (a repeat's are not)."""


class ContainerEventStore(Protocol):
    """Container events and the sweeps that turn silence into events (see the module doc)."""

    def event_batch(
        self, inbox: str, messages: Sequence[str], containers: Sequence[tuple[str, str]]
    ) -> AbstractAsyncContextManager[EventBatchSession]:
        """Open a batch: mark `messages` in `inbox`, lock and read what `containers` (container id, message id) of
        the fresh messages touch; committed when the block ends normally."""

    async def overdue(self, timeout_seconds: float) -> list[OverdueContainer]:
        """Up to 1,000 containers planned or creating (not pending replacements) unchanged for `timeout_seconds`,
        by id."""

    async def on_silent_nodes(self, ttl_seconds: float) -> list[SilentContainer]:
        """Up to 1,000 live, acknowledged containers (running, paused, updating, stopping; not pending
        replacements) of nodes without a heartbeat for `ttl_seconds`, by id."""

    async def record_health(self, reports: Sequence[HealthReport]) -> None:
        """Write each reported health onto its container (docs/node-agent.md "Health and node TTL"), only while the
        container is live (planned through stopping) and on the node that reported it; the health's time is now when
        it changes."""


__all__ = [
    "ContainerEventStore",
    "EventBatchSession",
    "EventBatchWrite",
    "EventMember",
    "EventRow",
    "FinishedDeploy",
    "HealthReport",
    "OpenedEventBatch",
    "OverdueContainer",
    "SilentContainer",
]
