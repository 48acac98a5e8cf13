"""Who may report a container's event (docs/node-agent.md "One message per group"): the pure checks.

A node agent answers on its node's subjects (`eru.container.<node>.<kind>`), a sim process for its group's batches on
`eru.group.<group>.results`; the bus's accounts let each publish only there (eru.bus.access). These checks hold the
bodies to the same: every event of a node's message names that node, every event of a group's message a node of the
group. The allocator also applies an event only to a container the ledger places on the node the event names
(eru_allocator.containers.event_batch), so no agent can move another node's containers.
"""

from __future__ import annotations

from collections.abc import Sequence

from eru.domain.messages import ContainerEvent, GroupEvents
from eru.errors import InvalidInput
from eru.nodeagent.heartbeats import in_group


def check_node_events(node: str, events: Sequence[ContainerEvent], *, batch: bool) -> None:
    """Every event names `node` (the node of the subject it came on); else InvalidInput naming the event's `node`
    field (`events[<i>].node` in a batch, `node` for a single event)."""
    for index, event in enumerate(events):
        if event.node != node:
            where = f"events[{index}].node" if batch else "node"
            raise InvalidInput(where, f"node {event.node!r} reported on the subject of node {node!r}")


def check_group_events(results: GroupEvents) -> None:
    """Every event of a `GroupEvents` is of a node of its group (`<group>` or `<group>-<number>`); else InvalidInput
    naming the event's `node` field (a process answers only for its own nodes)."""
    for index, event in enumerate(results.events):
        if not in_group(results.group, event.node):
            raise InvalidInput(f"events[{index}].node", f"node {event.node!r} is not of group {results.group!r}")
