"""A node's batch of commands (`eru.node.<node>.cmd.batch`), each result reported as soon as it is known
(docs/node-agent.md "Batches").

Every command of the batch runs as it would alone (one at a time per container, at most the agent's engine slots at
once, in the order of the batch). Whenever results are ready they are saved and published together as one
`ContainerEvents`; results that become ready while that publication is on its way go out in the next one. So on a
real engine each container is reported when the engine has started it, not when the last one of the batch has; on
the sim runtime, whose commands finish at once, the batch is still answered by one message. The delivery is acked
(the handler returns) once every command of the batch is settled and every result was published.

Message ids are deterministic: the whole batch in one message is `uuid5(node/batch_id)` (as before), a part of it
`uuid5(node/batch_id/<its command ids>)`. A result whose publication was confirmed is not published again by a
redelivery of the batch (the agent keeps which ones it reported, as long as it remembers their results).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from eru.bus import Delivery, Envelope, new_envelope, publish
from eru.bus.subjects import container_event
from eru.domain.messages import ContainerEvent, ContainerEvents, NodeCommand, NodeCommands
from eru_node_agent.config import result_id

if TYPE_CHECKING:
    from eru_node_agent.agent import NodeAgent


class Reported:
    """The command ids whose results a batch answer has carried (published and confirmed), the newest `limit`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, command_id: object) -> bool:
        return command_id in self._ids

    def add(self, command_ids: Sequence[str]) -> None:
        """Note `command_ids` as reported, forgetting the oldest beyond the limit."""
        for command_id in command_ids:
            self._ids[command_id] = None
            self._ids.move_to_end(command_id)
        while len(self._ids) > self.limit:
            self._ids.popitem(last=False)


def answer_id(node: str, batch: NodeCommands, command_ids: Sequence[str]) -> str:
    """The message id of an answer carrying `command_ids` (in batch order): the batch's own for all of them."""
    if len(command_ids) == len(batch.commands):
        return result_id(node, batch.batch_id)
    return result_id(node, f"{batch.batch_id}/{','.join(command_ids)}")


async def answer_batch(agent: NodeAgent, batch: NodeCommands, envelope: Envelope, delivery: Delivery) -> None:
    """Run every command of `batch` (each once: `NodeAgent.result_of`), publishing results as they are ready.

    A command that raised (the engine unavailable: `Retryable`) is raised once every other command is settled and
    its result published, so the redelivery runs only what did not finish."""
    tasks = {
        asyncio.create_task(agent.result_of(command, envelope, delivery, alone=False)): index
        for index, command in enumerate(batch.commands)
    }
    pending: set[asyncio.Task[ContainerEvent]] = set(tasks)
    failure: BaseException | None = None
    bus_failed = False
    unsaved = False
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            ready: list[tuple[str, ContainerEvent]] = []
            for task in sorted(done, key=tasks.__getitem__):
                error = task.exception()
                if error is not None:
                    failure = failure or error
                    continue
                unsaved = True
                command_id = batch.commands[tasks[task]].command_id
                if command_id not in agent.reported:
                    ready.append((command_id, task.result()))
            if ready and not bus_failed:
                # saved before it is published: a crash in between re-runs these commands, which find their
                # containers on the engine (create reuses an existing container of the same id)
                agent.store.save(agent.state)
                unsaved = False
                try:
                    await _publish(agent, batch, ready, envelope)
                except Exception as error:  # the bus: the rest still settles, then the delivery is retried
                    failure, bus_failed = failure or error, True
    except asyncio.CancelledError:
        for task in pending:
            task.cancel()
        raise
    if unsaved:
        agent.store.save(agent.state)
    if failure is not None:
        raise failure


async def _publish(
    agent: NodeAgent, batch: NodeCommands, ready: list[tuple[str, ContainerEvent]], cause: Envelope
) -> None:
    ids = [command_id for command_id, _ in ready]
    report = ContainerEvents(node=agent.node, events=[event for _, event in ready])
    out = new_envelope("eru.container.batch", agent.config.source, causation=cause)
    out = out.with_id(answer_id(agent.node, batch, ids))
    await publish(agent.js, container_event(agent.node, "batch"), report, out)
    agent.reported.add(ids)


async def settle_part(
    agent: NodeAgent, commands: Sequence[NodeCommand], envelope: Envelope, delivery: Delivery
) -> tuple[list[tuple[str, ContainerEvent]], BaseException | None]:
    """Run this node's part of a command group's batch (each command once: `NodeAgent.result_of`) and save the
    state; the results not yet reported, in the part's order, and the first failure. The group publishes every
    node's results in one message (eru_node_agent.group)."""
    outcomes = await asyncio.gather(
        *(agent.result_of(command, envelope, delivery, alone=False) for command in commands), return_exceptions=True
    )
    ready: list[tuple[str, ContainerEvent]] = []
    failure: BaseException | None = None
    for command, outcome in zip(commands, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            failure = failure or outcome
        elif command.command_id not in agent.reported:
            ready.append((command.command_id, outcome))
    # saved before it is published: a crash in between re-runs these commands, which find their containers
    agent.store.save(agent.state)
    return ready, failure
