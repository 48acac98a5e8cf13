"""What a node agent remembers across restarts: its containers (labels and current allocation) and the results of
recent commands (for idempotency). A JSON file for a real node; memory for simulated ones.

`Known` entries and the remembered events are immutable (a change replaces the entry), so the memory store saves by
reference: a shallow copy of the container table and only the commands remembered since the last save. The agent
saves after every command, so a save must not cost in proportion to everything the node ever ran.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from eru.bus.codec import decode
from eru.domain.messages import ContainerEvent
from eru.domain.resources import Allocation
from eru.errors import InvalidInput
from eru.nodeagent.engine import ManagedContainer, bound_core_count, managed_container
from eru_node_agent.remembered import MAX_REMEMBERED_COMMANDS, Remembered, RememberedResults

__all__ = ["MAX_REMEMBERED_COMMANDS", "AgentState", "FileStateStore", "Known", "MemoryStateStore", "StateStore"]


@dataclass(frozen=True)
class Known:
    """A container of this node: its labels and its allocation now (labels keep the one it was created with).

    Immutable: a change is a new entry (`dataclasses.replace`); the labels are never changed after creation, so
    what is read from them is parsed once per entry, not once per metrics sample (docs/node-agent.md "Cost per
    container")."""

    labels: dict[str, str]
    allocation: Allocation
    running: bool = True
    cpu_quota: float | None = None  # the eviction service's CPU squeeze in force (cores), on top of `allocation`

    @cached_property
    def managed(self) -> ManagedContainer | None:
        """Its eru identity from its labels (parsed on first use, then kept with the entry)."""
        return managed_container(self.labels)

    @cached_property
    def sample_fields(self) -> dict[str, Any] | None:
        """What its metrics carry from its labels (`ContainerMetrics` fields other than the measured ones); None
        for a container without eru labels."""
        managed = self.managed
        if managed is None:
            return None
        return {
            "priority_class": managed.priority_class,
            "priority": managed.priority,
            "tenant": managed.tenant,
            "cpu_request": managed.cpu_request,
            "cpu_limit": managed.cpu_limit,
            "memory_request": managed.memory_request,
            "memory_limit": managed.memory_limit,
            "workload": managed.workload,
            "desired": max(0, managed.desired),
            "evictions": max(0, managed.evictions),
            "budget": dict(managed.budget),
            "cpu_cores": bound_core_count(self.allocation),
        }


@dataclass
class AgentState:
    """Containers by eru id, and command results by command id (oldest first, bounded: eru_node_agent.remembered)."""

    containers: dict[str, Known] = field(default_factory=dict)
    commands: RememberedResults = field(default_factory=RememberedResults)
    # containers an operator dissociated (`eru container dissociate`): still on the engine with eru's labels, no
    # longer eru's; listed as not eru's and never reported again, so that nobody removes them (docs/cli.md)
    dissociated: set[str] = field(default_factory=set)

    def remember(self, command_id: str, event: ContainerEvent) -> None:
        """Keep the result of a command, forgetting the oldest beyond the bounds."""
        self.commands.remember(command_id, event)

    def to_json(self) -> dict[str, Any]:
        """The state as plain JSON values (each result as its msgpack body in base64)."""
        return {
            "containers": {
                cid: {
                    "labels": k.labels,
                    "allocation": k.allocation.model_dump(mode="json"),
                    "running": k.running,
                    **({"cpu_quota": k.cpu_quota} if k.cpu_quota is not None else {}),
                }
                for cid, k in self.containers.items()
            },
            "commands": [[cid, base64.b64encode(entry.body).decode()] for cid, entry in self.commands.entries.items()],
            **({"dissociated": sorted(self.dissociated)} if self.dissociated else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AgentState:
        """The state from `to_json`'s form (or the older one with results as JSON objects); damaged entries are
        dropped (labels on the engine are the record)."""
        state = cls()
        state.dissociated = {str(cid) for cid in data.get("dissociated") or [] if isinstance(cid, str)}
        for cid, entry in (data.get("containers") or {}).items():
            try:
                state.containers[cid] = Known(
                    labels=dict(entry["labels"]),
                    allocation=Allocation.model_validate(entry["allocation"]),
                    running=bool(entry.get("running", True)),
                    cpu_quota=float(entry["cpu_quota"]) if entry.get("cpu_quota") is not None else None,
                )
            except (KeyError, TypeError, ValidationError):
                continue
        for item in data.get("commands") or []:
            try:
                result = item[1]
                if isinstance(result, str):
                    body = base64.b64decode(result, validate=True)
                    decode(body, ContainerEvent)  # a damaged body is dropped now, not when a repeat needs it
                    state.commands.put(str(item[0]), Remembered(state.commands.clock(), body))
                else:
                    state.remember(str(item[0]), ContainerEvent.model_validate(result))
            except (IndexError, TypeError, ValueError, ValidationError, InvalidInput):
                continue
        return state


class StateStore(Protocol):
    """Where the state lives between restarts."""

    def load(self) -> AgentState:
        """The saved state (empty when there is none)."""
        ...

    def save(self, state: AgentState) -> None:
        """Save the state."""
        ...


class FileStateStore:
    """The state as a JSON file, replaced atomically (write to a temporary file, then rename)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> AgentState:
        """The file's state; a missing or unreadable file is an empty state."""
        try:
            return AgentState.from_json(json.loads(self.path.read_text()))
        except (OSError, ValueError, AttributeError):
            return AgentState()

    def save(self, state: AgentState) -> None:
        """Write the state."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(state.to_json(), separators=(",", ":")))
        os.replace(temporary, self.path)


class MemoryStateStore:
    """The state kept in memory (simulated nodes; a new agent on the same store sees what the old one saved).

    A save keeps what the state holds at that moment: entries are immutable, so copying the container table and
    adding the results remembered since the previous save is enough (no serialisation, no full copy of the
    command memory). What the agent changes after a save is not seen by `load` until the next save.
    """

    def __init__(self) -> None:
        self._containers: dict[str, Known] = {}
        self._commands = RememberedResults()
        self._dissociated: set[str] = set()

    def load(self) -> AgentState:
        """The last saved state (a copy: the loading agent's changes do not touch what is saved)."""
        return AgentState(
            containers=dict(self._containers), commands=self._commands.copy(), dissociated=set(self._dissociated)
        )

    def save(self, state: AgentState) -> None:
        """Keep the container table as it is now and the results remembered since the last save."""
        self._containers = dict(state.containers)
        self._dissociated = set(state.dissociated)
        # `remember` only ever appends (or moves a repeat to the end): walk back from the newest entry to the first
        # one already saved as is.
        fresh: list[tuple[str, Remembered]] = []
        saved = self._commands.entries
        for command_id, entry in reversed(state.commands.entries.items()):
            if saved.get(command_id) is entry:
                break
            fresh.append((command_id, entry))
        for command_id, entry in reversed(fresh):
            self._commands.put(command_id, entry)
