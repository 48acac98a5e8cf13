"""The node's inventory: every container of the engine with the resources it applies (docs/node-agent.md)."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Mapping

from eru.domain.inventory import InventoryEntry
from eru.domain.messages import ContainerEvent, NodeCommand
from eru.nodeagent.engine import L_CONTAINER, ManagedContainer, managed_container, named_by_eru, stray_id
from eru_node_agent.runtime.base import Runtime
from eru_node_agent.state import Known


def _identity(labels: Mapping[str, str], known: Mapping[str, Known]) -> ManagedContainer | None:
    """The container's eru identity: the agent's parsed copy when its labels are the ones the agent knows."""
    entry = known.get(labels.get(L_CONTAINER, ""))
    if entry is not None and (entry.labels is labels or entry.labels == labels):
        return entry.managed
    return managed_container(labels)


async def list_entries(
    runtime: Runtime,
    node: str,
    suppressed: Collection[str],
    known: Mapping[str, Known] | None = None,
    dissociated: Collection[str] = (),
) -> list[InventoryEntry]:
    """The engine's containers; this node's eru containers with their applied resources (one that vanishes between
    the listing and reading its resources is left out: it is gone). `known`: the agent's containers, whose labels
    are already parsed. A container with eru's labels for this node that eru did not name (a stray, started by hand)
    is listed by `stray_id`, which no ledger holds: the reconciler finds it `unknown` and applies its rule. A
    `dissociated` one is listed as not eru's (the reconciler only reports it)."""
    entries = []
    for container in await runtime.list():
        managed = _identity(container.labels, known or {})
        if managed is not None and managed.container_id in dissociated:
            managed = None
        if managed is None:
            name = container.name or container.engine_id[:12]
            entries.append(InventoryEntry(container_id=name, state=container.state))
            continue
        if managed.node != node:
            entries.append(
                InventoryEntry(
                    container_id=managed.container_id, managed=True, node=managed.node, state=container.state
                )
            )
            continue
        if not named_by_eru(container.name, managed.container_id):
            stray = stray_id(container.engine_id)
            entries.append(InventoryEntry(container_id=stray, managed=True, node=node, state=container.state))
            continue
        applied = await runtime.applied(managed.container_id)
        if applied is None:
            continue
        entries.append(
            InventoryEntry(
                container_id=managed.container_id,
                managed=True,
                node=node,
                state=container.state,
                cpuset=applied.cpuset,
                cpu_shares=applied.cpu_shares,
                cpu_quota=applied.cpu_quota,
                memory=applied.memory,
                suppressed=managed.container_id in suppressed,
            )
        )
    return entries


class CommandTrail:
    """What an inventory reports besides the engine's listing: containers commands touched while it was being taken
    (`busy`), removals whose result may not have reached the ledger yet (`removed`, kept for three inventory
    periods), and containers whose CPU the eviction service squeezed (`suppressed`)."""

    def __init__(self, keep_seconds: float) -> None:
        self.keep_seconds = keep_seconds
        self.windows: list[set[str]] = []
        self.removals: dict[str, tuple[float, str]] = {}
        self.suppressed: set[str] = set()
        self._pruned = 0.0  # when old removals were last dropped

    def touched(self, keys: Iterable[str]) -> None:
        """A command starts working on these containers."""
        for window in self.windows:
            window.update(keys)

    def note(self, command: NodeCommand, event: ContainerEvent) -> None:
        """A command finished with `event`."""
        now = time.monotonic()
        if event.kind == "removed":
            self.removals[event.container_id] = (now, event.reason or command.kind)
        elif event.kind == "replaced" and event.replaced_container_id:
            self.removals[event.replaced_container_id] = (now, f"replaced by {event.container_id}")
        if event.kind == "updated" and command.kind == "suppress":  # the eviction service's squeeze, docs/colocation.md
            squeezed = command.cpu_quota is not None
            (self.suppressed.add if squeezed else self.suppressed.discard)(command.container_id)
        if self.removals and now - self._pruned >= 1.0:  # at most once a second: not a walk per command
            self._pruned = now
            horizon = now - self.keep_seconds
            for container_id in [cid for cid, (when, _) in self.removals.items() if when < horizon]:
                del self.removals[container_id]

    def removed(self) -> dict[str, str]:
        """Recently removed containers and why (within `keep_seconds`)."""
        horizon = time.monotonic() - self.keep_seconds
        return {cid: reason for cid, (when, reason) in sorted(self.removals.items()) if when >= horizon}
