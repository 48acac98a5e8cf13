"""One batch of container events applied in memory (docs/pipeline.md, step 6): the container state machine
(`containers/lifecycle.py`) over the locked rows, the resources each change gives back or takes, the replacements, the
containers that must be removed (started after they were given up) or announced lost, and per deploy what
reported. No I/O: `events.apply_events` reads the rows, applies the events here and writes what changed.
"""

from __future__ import annotations

import json
from typing import Any

import structlog

from eru.activity import ACTIVITY
from eru.domain import ContainerEvent
from eru.store.container_events import EventRow
from eru.store.protocol import Usage
from eru_allocator.containers.lifecycle import GONE_STATES, holds_resources, transition
from eru_allocator.store import sql

log = structlog.get_logger()

STATE_COLUMNS = frozenset({"state", "reason"})
"""A change of only these columns is written without rewriting the row's JSON columns."""


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


class ContainerBatch:
    """The rows one batch works on, changed in memory by the container state machine and written back at the end."""

    def __init__(self, rows: dict[str, EventRow], successors: dict[str, str]) -> None:
        self.rows = rows
        self.successors = successors  # old container id → its pending replacement's id
        self.dirty: set[str] = set()
        self.reshaped: set[str] = set()  # rows whose allocation, resources or replaces changed too
        self.usage: dict[str, list[Usage]] = {}
        self.strays: list[EventRow] = []  # containers that started after they were given up: to be removed
        self.lost: list[tuple[EventRow, ContainerEvent]] = []  # marked lost: announced on the bus
        # per deploy, what reported in this batch (for `progress` events): started ids, failed id → reason
        self.progress: dict[str, tuple[list[str], dict[str, str]]] = {}

    def give_back(self, row: EventRow, allocation: dict[str, Any], sign: int = -1) -> None:
        usage = sql.allocation_usage(allocation)
        if sign < 0:
            usage = Usage(
                {k: -v for k, v in usage.cpu_map.items()}, -usage.memory, {k: -v for k, v in usage.numa_memory.items()}
            )
        self.usage.setdefault(row.node, []).append(usage)

    def set(self, row: EventRow, **changes: Any) -> None:
        for name, value in changes.items():
            setattr(row, name, value)
        self.dirty.add(row.id)
        if not changes.keys() <= STATE_COLUMNS:
            self.reshaped.add(row.id)

    def apply(self, event: ContainerEvent) -> None:
        row = self.rows.get(event.container_id)
        if row is None:
            ACTIVITY.count("container.event.unknown")
            log.debug("container.event.unknown", container_id=event.container_id, node=event.node, kind=event.kind)
            return
        if row.node != event.node:
            # an agent speaks only for its own node's containers (eru.nodeagent.reporters): another node's event
            # about this container (`foreign` on a shared engine, or a hostile agent) changes nothing
            ACTIVITY.count("container.event.other_node")
            log.debug("container.event.other_node", container_id=event.container_id, node=event.node, on=row.node)
            return
        if row.replaces is not None:
            if row.state not in ("planned", "creating"):
                return
            # a replacement waits for the decisive event: replaced (success) or failed/removed (rolled back)
            if event.kind == "replaced":
                self._replaced(row)
            elif event.kind in ("failed", "removed"):
                self.set(row, state="failed", reason=event.reason or event.kind)
                old = self.rows.get(row.replaces)
                if old is not None and old.state in ("paused", "updating"):
                    self.set(old, state="running")
            return
        successor = self.successors.get(row.id)
        if successor is not None and self.rows[successor].state in ("planned", "creating"):
            if event.kind in ("replaced", "removed"):
                self._replaced(self.rows[successor])
            return
        if event.kind != "replaced":
            self._transition(row, event)

    def _replaced(self, replacement: EventRow) -> None:
        """The new container runs with the old one's allocation (no charge moves); the old one is gone."""
        old_id = replacement.replaces
        self.set(replacement, state="running", replaces=None, reason=f"replaces {old_id}")
        old = self.rows.get(old_id) if old_id is not None else None
        if old is not None and old.state not in GONE_STATES:
            self.set(old, state="removed", reason=f"replaced by {replacement.id}")

    def _transition(self, row: EventRow, event: ContainerEvent) -> None:
        change = transition(
            row.state, event.kind, updating=row.previous_allocation is not None, command=event.command_kind
        )
        if change is None:
            if row.state in GONE_STATES and event.kind == "started":
                self.strays.append(row)  # it holds nothing on our books any more: it must not run either
            return
        previous = _loads(row.previous_allocation)
        if change.restore_previous and previous is not None:
            allocation = _loads(row.allocation)
            # the node agent refused the update: the old allocation (and requirement) stay, so does the old charge
            previous = dict(previous)
            resources = previous.pop("resources", None)
            self.give_back(row, allocation)
            self.give_back(row, previous, sign=1)
            self.set(
                row,
                state=change.state,
                reason=event.reason or "update failed",
                allocation=json.dumps(previous),
                previous_allocation=None,
                resources=json.dumps(resources) if resources else row.resources,
            )
            return
        if change.releases and holds_resources(row.state, False):
            self.give_back(row, _loads(row.allocation))
        if change.state == "lost":
            self.lost.append((row, event))
        if row.deploy_id is not None and row.state in ("planned", "creating"):
            started, failed = self.progress.setdefault(row.deploy_id, ([], {}))
            if change.state == "running":
                started.append(row.id)
            elif change.state in ("failed", "removed"):
                failed[row.id] = event.reason or change.state
        if (change.clear_previous or change.releases) and row.previous_allocation is not None:
            self.set(row, state=change.state, reason=event.reason or row.reason, previous_allocation=None)
        else:  # only the state moves (planned → running for most events): written without the JSON columns
            self.set(row, state=change.state, reason=event.reason or row.reason)
