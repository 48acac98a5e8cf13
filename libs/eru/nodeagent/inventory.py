"""What a node agent finds after a restart (docs/node-agent.md): pure classification of the engine's containers.

* present: carries eru's labels for this node (whether or not the agent remembered it);
* vanished: the agent remembered it (state file) but the engine no longer has it;
* foreign: anything else on the engine, an eru container labelled for another node or a container eru never made.
The agent never touches a foreign container; it reports it so an operator knows it takes capacity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from eru.nodeagent.engine import ManagedContainer, managed_container


@dataclass(frozen=True)
class Foreign:
    """A container that is not this node's: the id to report it by and why it is foreign."""

    container_id: str
    reason: str


@dataclass(frozen=True)
class Inventory:
    """The engine's containers sorted into present (by eru id), vanished (eru ids) and foreign."""

    present: dict[str, tuple[ManagedContainer, str]]
    vanished: list[str]
    foreign: list[Foreign]


def classify(
    node: str, engine: Iterable[tuple[str, str, Mapping[str, str], str]], remembered: Iterable[str]
) -> Inventory:
    """Sort the engine's containers, given as (engine id, name, labels, state), against what the agent remembered."""
    present: dict[str, tuple[ManagedContainer, str]] = {}
    foreign: list[Foreign] = []
    for engine_id, name, labels, state in engine:
        managed = managed_container(labels)
        if managed is not None and managed.node == node:
            present[managed.container_id] = (managed, state)
        elif managed is not None:
            foreign.append(Foreign(managed.container_id, f"an eru container of node {managed.node!r} ({state})"))
        else:
            foreign.append(Foreign(name or engine_id[:12], f"not created by eru (engine id {engine_id[:12]}, {state})"))
    vanished = sorted(set(remembered) - set(present))
    return Inventory(present=dict(sorted(present.items())), vanished=vanished, foreign=foreign)
