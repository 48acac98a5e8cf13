"""The command group of a sim process: one consumer for the commands of all of its nodes (eru.bus.node_groups,
docs/node-agent.md "A command group per sim process").

Each message is handed to the agent of the node its subject names (`eru.node.<node>.cmd.<kind>`), which checks and
runs it exactly as its own consumer would have (`NodeAgent.handle`). A subject naming a node the process does not
serve is dead-lettered (`Permanent`); the group's filters make that impossible unless the consumer was changed
behind the process's back. A command that arrives for a node still starting (a process restarted while the
allocator kept sending) waits for the start, then runs. The group's own subject (`eru.group.<group>.cmd.batch`)
carries the creates of one allocator transaction for several of its nodes (`GroupCommands`): each node's part is
handed to its agent and run as the node's own message would be, and every node's results go back in one
`GroupEvents` on `eru.group.<group>.results` (docs/node-agent.md "One message per group").
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import structlog
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from eru.bus import Delivery, Envelope, Permanent, Retryable, new_envelope, publish
from eru.bus.consumer import Consumer, ensure_consumer
from eru.bus.errors import BusError
from eru.bus.node_groups import group_consumer
from eru.bus.streams import NODE
from eru.bus.subjects import group_results
from eru.domain.messages import ContainerEvent, GroupCommands, GroupEvents, NodeCommandMessage
from eru_node_agent import batches
from eru_node_agent.agent import NodeAgent
from eru_node_agent.config import result_id

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
        self.source = f"node-agent/{group}"  # `ce-source` of what the group publishes (its consumer's too)
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
                f"the command consumer {self.durable} of {len(self.agents)} nodes is missing or differs, and this "
                "account could not create it: provision it first (eru up does; eru.bus.node_groups as admin)"
            ) from None

    async def handle(self, message: NodeCommandMessage, envelope: Envelope, delivery: Delivery) -> None:
        """Hand the command(s) to the agent of the subject's node, once that node has started; a batch of the group
        (`eru.group.<group>.cmd.batch`) to the agent of each node it names (`run_group_batch`)."""
        parts = delivery.subject.split(".")
        if len(parts) == 5 and parts[:2] == ["eru", "group"] and parts[3:] == ["cmd", "batch"]:
            await self.run_group_batch(parts[2], message, envelope, delivery)
            return
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

    async def run_group_batch(
        self, group: str, message: NodeCommandMessage, envelope: Envelope, delivery: Delivery
    ) -> None:
        """Run each node's part of a group's batch as that node's own message would be run, all at once, and answer
        with one `GroupEvents` on `eru.group.<group>.results` for all of them. Refused whole, before anything runs,
        if it is not this group's or names a node the process does not serve (as a node's batch naming another node
        is). A part that failed is raised once every part is settled and the others' results published: the
        redelivery runs each node's part again, each command once (its result is remembered,
        `NodeAgent.result_of`), and publishes only what was not reported."""
        batch = message.root
        if group != self.group:
            raise Permanent(f"subject {delivery.subject!r} is not command group {self.group!r}'s")
        if not isinstance(batch, GroupCommands):
            raise Permanent(f"subject {delivery.subject!r} carries a group's batch, the message is not one")
        if batch.group != self.group:
            raise Permanent(f"group is {batch.group!r}, delivered to command group {self.group!r}")
        for index, command in enumerate(batch.commands):
            if command.node not in self.agents:
                raise Permanent(f"commands[{index}].node {command.node!r} is not a node of command group {group!r}")
        nodes = batch.parts()
        agents = [self.agents[node] for node in nodes]
        starting = [agent.started.wait() for agent in agents if not agent.started.is_set()]
        if starting:
            try:
                await asyncio.wait_for(asyncio.gather(*starting), START_WAIT_SECONDS)
            except TimeoutError:
                raise Retryable("a node of the batch is still starting") from None
        settled = await asyncio.gather(
            *(batches.settle_part(agent, nodes[agent.node], envelope, delivery) for agent in agents)
        )
        failures = [failure for _, failure in settled if failure is not None]
        ready = {command_id: event for part, _ in settled for command_id, event in part}
        if ready:
            try:
                await self._publish(batch, ready, envelope)
            except Exception as error:  # the bus: the delivery is retried, and runs nothing twice
                failures.insert(0, error)
            else:
                for agent, (part, _) in zip(agents, settled, strict=True):
                    agent.reported.add([command_id for command_id, _ in part])
        if failures:
            # a part to retry wins over one that can never run: the redelivery may still finish the others
            raise next((f for f in failures if not isinstance(f, Permanent)), failures[0])

    async def _publish(self, batch: GroupCommands, ready: dict[str, ContainerEvent], cause: Envelope) -> None:
        """Every node's results of `batch` not reported yet, in one `GroupEvents` in the order of the batch's
        commands. Its message id is derived from the group and the batch id (with the command ids when only some
        are carried), so a repeat is dropped by JetStream's duplicate window."""
        ids = [command.command_id for command in batch.commands if command.command_id in ready]
        key = batch.batch_id if len(ids) == len(batch.commands) else f"{batch.batch_id}/{','.join(ids)}"
        # `<group>.results`: a dot is in no node name, so no node's answer has this id
        envelope = new_envelope("eru.group.results", self.source, causation=cause).with_id(
            result_id(f"{self.group}.results", key)
        )
        report = GroupEvents(group=self.group, events=[ready[command_id] for command_id in ids])
        await publish(self.js, group_results(self.group), report, envelope)

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
            source=self.source,
        )
        log.info("node_agent.command_group", group=self.group, consumer=self.durable, nodes=len(self.agents))
        await consumer.run()
