"""What a node agent remembers across restarts: its containers (labels and current allocation) and the results of
recent commands (for idempotency). A JSON file for a real node; memory for simulated ones.

`Known` entries and the remembered events are immutable (a change replaces the entry), so the memory store saves by
reference: a shallow copy of the container table and only the commands remembered since the last save. The agent
saves after every command, so a save must not cost in proportion to everything the node ever ran.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from eru.domain.messages import ContainerEvent
from eru.domain.resources import Allocation
from eru.nodeagent.engine import ManagedContainer, managed_container

MAX_REMEMBERED_COMMANDS = 10_000


@dataclass(frozen=True)
class Known:
    """A container of this node: its labels and its allocation now (labels keep the one it was created with).

    Immutable: a change is a new entry (`dataclasses.replace`); the labels are never changed after creation."""

    labels: dict[str, str]
    allocation: Allocation
    running: bool = True

    @property
    def managed(self) -> ManagedContainer | None:
        """Its eru identity from its labels."""
        return managed_container(self.labels)


@dataclass
class AgentState:
    """Containers by eru id, and command results by command id (oldest first, bounded)."""

    containers: dict[str, Known] = field(default_factory=dict)
    commands: OrderedDict[str, ContainerEvent] = field(default_factory=OrderedDict)

    def remember(self, command_id: str, event: ContainerEvent) -> None:
        """Keep the result of a command, forgetting the oldest beyond the bound."""
        self.commands[command_id] = event
        self.commands.move_to_end(command_id)
        while len(self.commands) > MAX_REMEMBERED_COMMANDS:
            self.commands.popitem(last=False)

    def to_json(self) -> dict[str, Any]:
        """The state as plain JSON values."""
        return {
            "containers": {
                cid: {"labels": k.labels, "allocation": k.allocation.model_dump(mode="json"), "running": k.running}
                for cid, k in self.containers.items()
            },
            "commands": [[cid, event.model_dump(mode="json")] for cid, event in self.commands.items()],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AgentState:
        """The state from `to_json`'s form; damaged entries are dropped (labels on the engine are the record)."""
        state = cls()
        for cid, entry in (data.get("containers") or {}).items():
            try:
                state.containers[cid] = Known(
                    labels=dict(entry["labels"]),
                    allocation=Allocation.model_validate(entry["allocation"]),
                    running=bool(entry.get("running", True)),
                )
            except (KeyError, TypeError, ValidationError):
                continue
        for item in data.get("commands") or []:
            try:
                state.remember(str(item[0]), ContainerEvent.model_validate(item[1]))
            except (IndexError, TypeError, ValidationError):
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
    appending the commands remembered since the previous save is enough (no serialisation, no full copy of the
    bounded command memory). What the agent changes after a save is not seen by `load` until the next save.
    """

    def __init__(self) -> None:
        self._containers: dict[str, Known] = {}
        self._commands: OrderedDict[str, ContainerEvent] = OrderedDict()

    def load(self) -> AgentState:
        """The last saved state (a copy: the loading agent's changes do not touch what is saved)."""
        return AgentState(containers=dict(self._containers), commands=OrderedDict(self._commands))

    def save(self, state: AgentState) -> None:
        """Keep the container table as it is now and the commands remembered since the last save."""
        self._containers = dict(state.containers)
        # `remember` only ever appends (or moves a repeat to the end): walk back from the newest entry to the first
        # one already saved as is.
        fresh: list[tuple[str, ContainerEvent]] = []
        for command_id in reversed(state.commands):
            event = state.commands[command_id]
            if self._commands.get(command_id) is event:
                break
            fresh.append((command_id, event))
        for command_id, event in reversed(fresh):
            self._commands[command_id] = event
            self._commands.move_to_end(command_id)
        while len(self._commands) > MAX_REMEMBERED_COMMANDS:
            self._commands.popitem(last=False)
