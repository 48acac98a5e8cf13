"""Inventories a message per process (docs/node-agent.md "Idle cost"): the pure decisions.

A sim node-agent process serving many nodes hands each node's inventory, when the node would have sent it, to the
process, which sends those taken since its last flush as one `NodeInventories` message on `eru.inventories.<group>`
(`chunks` cuts a large flush into messages); the allocator takes a group's message only for the group's own nodes
(`check_group`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from eru.domain.inventory import INVENTORIES_MAX, NodeInventories, NodeInventory
from eru.errors import InvalidInput
from eru.nodeagent.heartbeats import in_group

ENTRIES_PER_MESSAGE = 3_000  # listed containers in one message (~150 bytes each): well under the bus's 1 MiB


def chunks(
    inventories: Sequence[NodeInventory], max_nodes: int = INVENTORIES_MAX, max_entries: int = ENTRIES_PER_MESSAGE
) -> Iterator[list[NodeInventory]]:
    """`inventories` in order, in messages of at most `max_nodes` nodes and about `max_entries` listed containers
    (a node listing more than that goes alone)."""
    part: list[NodeInventory] = []
    entries = 0
    for inventory in inventories:
        size = len(inventory.containers) + len(inventory.busy) + len(inventory.removed)
        if part and (len(part) >= max_nodes or entries + size > max_entries):
            yield part
            part, entries = [], 0
        part.append(inventory)
        entries += size
    if part:
        yield part


def check_group(message: NodeInventories, subject_group: str) -> None:
    """The message is of the group of its subject (`eru.inventories.<group>`, the only one its process may publish
    on) and every inventory is of a node of that group; else InvalidInput naming `group` or the inventory's `node`
    field (a process speaks only for its own nodes)."""
    if message.group != subject_group:
        raise InvalidInput("group", f"group {message.group!r} sent on the subject of group {subject_group!r}")
    for index, inventory in enumerate(message.inventories):
        if not in_group(message.group, inventory.node):
            raise InvalidInput(
                f"inventories[{index}].node", f"node {inventory.node!r} is not of group {message.group!r}"
            )
