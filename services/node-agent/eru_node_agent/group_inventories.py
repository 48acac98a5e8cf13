"""A sim process's nodes' inventories, one message a flush (docs/node-agent.md "Idle cost").

Each node takes its inventory when it always has (at start, then every `inventory_interval_seconds` at its own place
in the interval, a quiet one only at its floor: `eru_node_agent.reports.inventory_once`); instead of publishing it
on `eru.node.<node>.inventory`, a node of a command group hands it to the process's `InventoryBatch`, which the
process's timer flushes every `FLUSH_SECONDS` as `NodeInventories` on `eru.inventories.<group>`. At 5,000 nodes the
per-node messages were 167 a second into nats-server and the allocator's reconciler, each its own statements; a
burst of deploys into the cell brought ~1,600 of them with it.

The race rule holds across the wait: the containers a command touches from the listing until the message is
published are reported `busy` (the node's trail window stays open until then).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from eru.bus import new_envelope, publish
from eru.bus.subjects import group_inventories
from eru.domain.inventory import NodeInventories, NodeInventory
from eru.nodeagent.group_inventories import chunks

if TYPE_CHECKING:
    from nats.js import JetStreamContext

    from eru_node_agent.agent import NodeAgent

log = structlog.get_logger()
FLUSH_SECONDS = 1.0  # how long a handed inventory may wait for the process's message


@dataclass
class Handed:
    """One node's inventory waiting for the flush, with its open trail window and its news (what the next one is
    compared with)."""

    agent: NodeAgent
    report: NodeInventory
    window: set[str]
    news: tuple[Any, ...]


class InventoryBatch:
    """The inventories a process's nodes handed since the last flush."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.subject = group_inventories(group)
        self.handed: list[Handed] = []
        self.messages = 0  # messages published (a figure for tests)

    def hand(self, agent: NodeAgent, report: NodeInventory, window: set[str], news: tuple[Any, ...]) -> None:
        """Keep `report` for the next flush; `window` (open in the node's trail) is closed by it."""
        self.handed.append(Handed(agent, report, window, news))

    async def flush(self, js: JetStreamContext, source: str) -> int:
        """Publish every inventory handed since the last flush, each with the containers commands touched meanwhile
        added to its `busy`, in messages of at most `chunks`; the nodes sent. A message that fails is logged and
        its nodes are not marked sent (their next periodic inventory goes whatever it says)."""
        taken, self.handed = self.handed, []
        if not taken:
            return 0
        sent = 0
        try:
            reports = [_with_busy(handed) for handed in taken]
            by_node = {id(report): handed for report, handed in zip(reports, taken, strict=True)}
            for part in chunks(reports):
                envelope = new_envelope("eru.node.inventories", source)
                await publish(js, self.subject, NodeInventories(group=self.group, inventories=part), envelope)
                self.messages += 1
                for report in part:
                    _sent(by_node[id(report)])
                sent += len(part)
        except Exception as error:  # the process's other reports go on; these nodes' next inventories go out
            log.warning(
                "node_agent.inventories_failed",
                group=self.group,
                nodes=len(taken) - sent,
                error=f"{type(error).__name__}: {error}",
            )
        finally:
            for handed in taken:
                handed.agent.trail.windows.remove(handed.window)
        return sent


def _with_busy(handed: Handed) -> NodeInventory:
    busy = set(handed.report.busy) | handed.window | handed.agent.locks.held()
    if len(busy) == len(handed.report.busy):
        return handed.report
    return handed.report.model_copy(update={"busy": sorted(busy)})


def _sent(handed: Handed) -> None:
    agent = handed.agent
    agent.inventories += 1
    agent.last_inventory = (handed.news, handed.report.taken_at)
    if agent.first_inventory_at is None:
        agent.first_inventory_at = handed.report.taken_at


def attach(agents: Sequence[NodeAgent], group: str) -> InventoryBatch:
    """One batch for `agents`' inventories (each agent hands its own to it from now on)."""
    batch = InventoryBatch(group)
    for agent in agents:
        agent.inventory_batch = batch
    return batch
