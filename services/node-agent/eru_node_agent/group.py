"""The command group of a sim process: one consumer for the commands of all of its nodes (eru.bus.node_groups,
docs/node-agent.md "A command group per sim process").

Each message is handed to the agent of the node its subject names (`eru.node.<node>.cmd.<kind>`), which checks and
runs it exactly as its own consumer would have (`NodeAgent.handle`). A subject naming a node the process does not
serve is dead-lettered (`Permanent`); the group's filters make that impossible unless the consumer was changed
behind the process's back. A command that arrives for a node still starting (a process restarted while the
allocator kept sending) waits for the start, then runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import structlog
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from eru.bus import Delivery, Envelope, Permanent, Retryable
from eru.bus.consumer import Consumer, ensure_consumer
from eru.bus.errors import BusError
from eru.bus.node_groups import group_consumer
from eru.bus.streams import NODE
from eru.domain.messages import NodeCommandMessage
from eru_node_agent.agent import NodeAgent

log = structlog.get_logger()
# how long a command for a node that is still starting waits for it (below the consumer's 60 s ack wait), before
# it is handed back for a later delivery
START_WAIT_SECONDS = 30.0
# a JetStream API request of the group (create or bind), longer than the context's 5 s: at a process's start the
# server is busy with thousands of nodes' registrations
GROUP_REQUEST_SECONDS = 30.0


class CommandGroup:
    """One durable consumer (`node-group-<group>`) for every node of `agents`, dispatching by subject."""

    def __init__(self, group: str, agents: Sequence[NodeAgent], js: JetStreamContext, stop: asyncio.Event) -> None:
        self.group = group
        self.agents = {agent.node: agent for agent in agents}
        self.js = js
        self.stop = stop
        # one consumer: its idle pull (1 s) and health check (2 s) cost nothing worth stretching
        self.durable, self.filters, self.options = group_consumer(group, [agent.node for agent in agents])

    async def ensure(self) -> None:
        """The group's consumer exists with exactly these nodes: found as the stack provisioned it, else created
        (a process without access control). Under access control a missing or different consumer cannot be made
        by the agent: a one-line error asking to provision it."""
        try:
            await asyncio.wait_for(
                ensure_consumer(self.js, NODE, self.durable, self.filters, self.options), GROUP_REQUEST_SECONDS
            )
        except NotFoundError:
            raise BusError(f"stream {NODE} does not exist: provision the streams first (eru up)") from None
        except TimeoutError:
            raise BusError(
                f"the command consumer {self.durable} of {len(self.filters)} nodes is missing or differs, and this "
                "account could not create it: provision it first (eru up does; eru.bus.node_groups as admin)"
            ) from None

    async def handle(self, message: NodeCommandMessage, envelope: Envelope, delivery: Delivery) -> None:
        """Hand the command(s) to the agent of the subject's node, once that node has started."""
        parts = delivery.subject.split(".")
        node = parts[2] if len(parts) == 5 and parts[:2] == ["eru", "node"] and parts[3] == "cmd" else None
        agent = self.agents.get(node) if node is not None else None
        if agent is None:
            raise Permanent(f"subject {delivery.subject!r} names no node of command group {self.group!r}")
        if not agent.started.is_set():
            try:
                await asyncio.wait_for(agent.started.wait(), START_WAIT_SECONDS)
            except TimeoutError:
                raise Retryable(f"node {node!r} is still starting") from None
        await agent.handle(message, envelope, delivery)

    async def run(self) -> None:
        """Consume until stop (the consumer is `ensure`d first)."""
        consumer = Consumer(
            self.js,
            NODE,
            self.durable,
            self.filters,
            NodeCommandMessage,
            self.handle,
            options=self.options,
            stop=self.stop,
            source=f"node-agent/{self.group}",
        )
        log.info("node_agent.command_group", group=self.group, consumer=self.durable, nodes=len(self.agents))
        await consumer.run()
