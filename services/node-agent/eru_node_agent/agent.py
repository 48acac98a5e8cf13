"""One node's agent: registration, rebuild after a restart, commands, heartbeats, metrics (docs/node-agent.md).

Commands come from a durable consumer filtered on `eru.node.<node>.cmd.*` (one per node, shared by every replica
of that node's agent), at most `max_concurrent_commands` messages at a time, one command at a time per container, at
most `engine_concurrency` commands on the engine at once. Each command's result is published once as a
`ContainerEvent` whose message id is derived from the command id, and remembered, so a repeated command has no
second effect and repeats the same event (JetStream and consumers' inboxes drop it).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import uuid
from collections import Counter
from typing import Any

import structlog
from nats.js import JetStreamContext

from eru.bus import ConsumerOptions, Delivery, Envelope, Permanent, Retryable, new_envelope, publish
from eru.bus.consumer import Consumer, ensure_consumer
from eru.bus.streams import NODE
from eru.bus.subjects import (
    container_event,
    metrics,
    node_commands,
    node_heartbeat,
    node_inventory,
    node_registration,
)
from eru.domain.inventory import NodeInventory
from eru.domain.messages import (
    ContainerEvent,
    GroupCommands,
    Heartbeat,
    NodeCommand,
    NodeCommandMessage,
    NodeCommands,
    NodeRegistration,
)
from eru.errors import InvalidInput
from eru.nodeagent.capacity import NodeCapacity
from eru.nodeagent.inventory import Inventory
from eru_node_agent import batches, rebuild, reports
from eru_node_agent.commands import UPDATE_KINDS, CommandExecutor
from eru_node_agent.config import RESULT_NAMESPACE, AgentConfig, result_id
from eru_node_agent.group_inventories import InventoryBatch
from eru_node_agent.inventory import CommandTrail
from eru_node_agent.locks import KeyedLocks
from eru_node_agent.runtime.base import EngineUnavailable, Runtime
from eru_node_agent.starting import start_until_done
from eru_node_agent.state import StateStore

log = structlog.get_logger()
NODE_DUPLICATE_WINDOW = 120.0  # seconds: ERU_NODE's duplicate window (eru.bus.streams)


class NodeAgent:
    """The agent of one node over one runtime."""

    def __init__(
        self, config: AgentConfig, runtime: Runtime, js: JetStreamContext, store: StateStore, *, grouped: bool = False
    ) -> None:
        self.config = config
        self.grouped = grouped  # commands come through the process's group consumer (eru_node_agent.group)
        self.node = config.node
        self.runtime = runtime
        self.js = js
        self.store = store
        self.state = store.load()
        # a result is kept while its command can still be redelivered or republished (eru_node_agent.remembered)
        self.state.commands.keep_seconds = config.max_deliver * config.ack_wait_seconds + NODE_DUPLICATE_WINDOW
        self.capacity: NodeCapacity | None = None
        self.executor: CommandExecutor | None = None
        self.consumer: Consumer[NodeCommandMessage] | None = None
        self.locks = KeyedLocks()
        self._in_flight: dict[str, asyncio.Event] = {}
        # at most this many commands work on the engine at once, in the order they asked (eru_node_agent.commands)
        self.engine_slots = asyncio.Semaphore(config.engine_concurrency)
        # the commands of batches whose results were published (a redelivered batch does not publish them again)
        self.reported = batches.Reported(self.state.commands.max_count)
        self.commands_done = 0
        self.summary: Counter[str] = Counter()  # "command:result" → count since the last summary line
        self.touched: dict[str, int] = {}  # commands started per container (reconcile skips what changed)
        self.health: dict[str, str] = {}  # health last reported per container (reports.report_health)
        self.run_id = uuid.uuid4().hex  # this run of the agent, in its inventories
        self.trail = CommandTrail(keep_seconds=3 * config.inventory_interval_seconds)
        self.inventories = 0
        self.last_sample: tuple[tuple[Any, ...], float] | None = None  # news and time of the last sample sent
        self.samples_skipped = 0  # an empty node's samples that said nothing new (eru.nodeagent.metrics)
        self.last_inventory: tuple[tuple[Any, ...], float] | None = None  # news and time of the last one sent
        self.first_inventory_at: float | None = None  # wall time of the first one sent (settling)
        self.inventories_skipped = 0  # an empty node's periodic inventories that said nothing new
        # a node of a command group hands its inventories to its process's message (eru_node_agent.group_inventories)
        self.inventory_batch: InventoryBatch | None = None
        self._log = log.bind(node=self.node)
        self._subjects: dict[str, str] = {}  # event kind → this node's subject (checked once)
        self.started = asyncio.Event()
        # A new node's consumer starts with new commands: a reinstalled node never replays an old node's history.
        self.consumer_options = ConsumerOptions(
            batch=config.max_concurrent_commands,
            concurrency=config.max_concurrent_commands,
            max_deliver=config.max_deliver,
            ack_wait_seconds=config.ack_wait_seconds,
            deliver_new_only=True,
            fetch_timeout_seconds=config.fetch_timeout_seconds,
            heal_check_seconds=config.heal_check_seconds,
        )

    # -- start: capacity, registration, rebuild ------------------------------------------------------------------
    async def start(self) -> Inventory:
        """Read the capacity, register the node, rebuild the state from the engine and report what was found."""
        capacity, labels = await self.runtime.capacity()
        self.capacity = capacity
        self.executor = CommandExecutor(
            self.node,
            self.runtime,
            self.state,
            capacity.cores,
            stop_timeout_seconds=self.config.stop_timeout_seconds,
            settle_seconds=self.config.settle_seconds,
            engine_slots=self.engine_slots,
        )
        # The consumer exists before the node is announced: no command sent after registration can be missed (a
        # grouped node's is the group's, made before any of its nodes starts).
        if not self.grouped:
            await ensure_consumer(self.js, NODE, self.config.durable, node_commands(self.node), self.consumer_options)
        registration = NodeRegistration(
            node=self.node,
            pod=self.config.pod,
            cpu_map=capacity.cpu_map,
            memory=capacity.memory,
            numa=capacity.numa,
            numa_memory=capacity.numa_memory,
            share_base=self.config.share_base,
            labels=labels,
            runtime="sim" if self.runtime.kind == "sim" else "docker",
        )
        envelope = new_envelope("eru.node.registered", self.config.source)
        await publish(self.js, node_registration(self.node), registration, envelope)
        inventory = await self.rebuild()
        await self.inventory_once()
        self._log.info(
            "node_agent.registered",
            cores=len(capacity.cpu_map),
            memory=capacity.memory,
            numa_nodes=len(set(capacity.numa.values())),
            present=len(inventory.present),
            vanished=len(inventory.vanished),
            foreign=len(inventory.foreign),
        )
        return inventory

    async def rebuild(self) -> Inventory:
        """The state from the engine's labels, each finding reported (eru_node_agent.rebuild.rebuild)."""
        return await rebuild.rebuild(self)

    async def emit(self, event: ContainerEvent, cause: Envelope, message_id: str | None = None) -> None:
        """Publish a container event on this node's subject (`message_id`: a deterministic id, for dedup)."""
        envelope = new_envelope(f"eru.container.{event.kind}", self.config.source, causation=cause)
        if message_id is not None:
            envelope = envelope.with_id(message_id)
        subject = self._subjects.get(event.kind)
        if subject is None:
            subject = self._subjects[event.kind] = container_event(self.node, event.kind)
        await publish(self.js, subject, event, envelope)

    # -- commands ------------------------------------------------------------------------------------------------
    async def handle(self, message: NodeCommandMessage, envelope: Envelope, delivery: Delivery) -> None:
        """The consumer's handler: check the command(s) are this node's, execute each once, publish the result(s) (a
        batch's as they come, `eru_node_agent.batches`)."""
        subject_kind = delivery.subject.rsplit(".", 1)[-1]
        batch = message.root
        if isinstance(batch, GroupCommands):
            raise Permanent(f"a batch of command group {batch.group!r} delivered to the agent of node {self.node!r}")
        if not isinstance(batch, NodeCommands):
            await self._handle_one(batch, subject_kind, envelope, delivery)
            return
        if subject_kind != "batch":
            raise Permanent(f"subject says {subject_kind!r} but the message is a batch of commands")
        for index, command in enumerate(batch.commands):
            if command.node != self.node:
                raise Permanent(f"commands[{index}] is for node {command.node!r}, delivered to node {self.node!r}")
        await batches.answer_batch(self, batch, envelope, delivery)

    async def _handle_one(
        self, command: NodeCommand, subject_kind: str, envelope: Envelope, delivery: Delivery
    ) -> None:
        if command.node != self.node:
            raise Permanent(f"command for node {command.node!r} delivered to the agent of node {self.node!r}")
        if subject_kind != command.kind:
            raise Permanent(f"subject says {subject_kind!r} but the command's kind is {command.kind!r}")
        event = await self.result_of(command, envelope, delivery, alone=True)
        await self.emit(event, envelope, result_id(self.node, command.command_id))

    async def result_of(
        self, command: NodeCommand, envelope: Envelope, delivery: Delivery, *, alone: bool
    ) -> ContainerEvent:
        """The command's result: remembered from an earlier delivery, or from executing it now (once)."""
        done = self.state.commands.get(command.command_id)
        if done is not None:
            return done
        running = self._in_flight.get(command.command_id)
        if running is not None:
            await running.wait()
            done = self.state.commands.get(command.command_id)
            if done is None:
                raise Retryable("the first delivery of this command did not finish")
            return done
        finished = asyncio.Event()
        self._in_flight[command.command_id] = finished
        try:
            return await self._execute(command, envelope, delivery, alone=alone)
        finally:
            finished.set()
            del self._in_flight[command.command_id]

    async def _execute(
        self, command: NodeCommand, envelope: Envelope, delivery: Delivery, *, alone: bool
    ) -> ContainerEvent:
        assert self.executor is not None, "start() must run before commands"
        keys = [command.container_id] + ([command.replacement.container_id] if command.replacement else [])
        for key in keys:
            self.touched[key] = self.touched.get(key, 0) + 1
        self.trail.touched(keys)
        async with self.locks.hold(keys):
            try:
                event = await self.executor.execute(command)
            except EngineUnavailable as error:
                if delivery.deliveries < self.config.max_deliver:
                    raise Retryable(str(error)) from None
                event = self._failure(command, f"engine unavailable after {delivery.deliveries} attempts: {error}")
            except InvalidInput as error:
                failed = self._failure(command, f"invalid command: {error.message}")
                if alone and not (command.kind in ("create", "replace") or command.kind in UPDATE_KINDS):
                    raise
                # The allocator charged (or is waiting for) this container: tell it. Alone, the command is then
                # dead-lettered; in a batch, its failure is one of the batch's results.
                self.state.remember(command.command_id, failed)
                if not alone:
                    return failed  # saved with the batch's results (eru_node_agent.batches)
                self.store.save(self.state)
                await self.emit(failed, envelope, result_id(self.node, command.command_id))
                raise
            self.state.remember(command.command_id, event)
            if alone:
                self.store.save(self.state)  # a batch saves before each publication of its results
            self.commands_done += 1
            self.trail.note(command, event)
        for key in keys:
            if key not in self.state.containers and not self.locks.busy(key):
                self.touched.pop(key, None)  # gone: nothing left to protect from reconcile
        self.summary[f"{command.kind}:{event.kind}"] += 1
        self._log.debug(  # one line per command at debug; `summary_once` reports them at info
            "node_agent.command",
            command=command.kind,
            command_id=command.command_id,
            container_id=command.container_id,
            result=event.kind,
            reason=event.reason or None,
        )
        return event

    def _failure(self, command: NodeCommand, reason: str) -> ContainerEvent:
        container_id = command.container_id
        if command.kind == "replace" and command.replacement is not None:
            container_id = command.replacement.container_id
        deploy_id = command.spec.deploy_id if command.spec else None
        if command.kind == "replace" and command.replacement is not None:
            deploy_id = command.replacement.deploy_id
        return ContainerEvent(
            node=self.node,
            container_id=container_id,
            deploy_id=deploy_id,
            command_id=command.command_id,
            command_kind=command.kind,
            kind="failed",
            reason=reason,
        )

    # -- heartbeats, reconciliation, metrics ---------------------------------------------------------------------
    async def beat(self) -> Heartbeat:
        """Report containers that died or vanished since the last look; the node's heartbeat (not yet sent)."""
        await self.reconcile()
        return Heartbeat(node=self.node, containers=sorted(self.state.containers))

    async def heartbeat_once(self) -> None:
        """Publish this node's heartbeat on its own subject (`beat`; a grouped process sends its nodes' beats
        together, eru_node_agent.heartbeats)."""
        beat = await self.beat()
        await publish(self.js, node_heartbeat(self.node), beat, new_envelope("eru.node.heartbeat", self.config.source))

    async def reconcile(self) -> None:
        """Compare what the agent believes with the engine (eru_node_agent.reports.reconcile)."""
        await reports.reconcile(self)

    async def inventory_once(self, *, periodic: bool = False) -> NodeInventory:
        """Publish everything the engine runs (eru_node_agent.reports.inventory_once)."""
        return await reports.inventory_once(self, periodic=periodic)

    async def metrics_once(self, interval_seconds: float) -> dict[str, Any]:
        """Sample the node and its containers and publish it; the sample in its wire form
        (eru_node_agent.reports.metrics_once)."""
        return await reports.metrics_once(self, interval_seconds)

    def summary_once(self) -> dict[str, int]:
        """Log (at info) what the agent did since the last summary — commands by kind and result — and reset."""
        counts = dict(sorted(self.summary.items()))
        self.summary.clear()
        self._log.info(
            "node_agent.summary",
            commands=sum(counts.values()),
            results=counts,
            containers=len(self.state.containers),
        )
        return counts

    def report_intervals(self) -> dict[str, float]:
        """Each periodic report and its interval in seconds."""
        return {
            "heartbeat": self.config.heartbeat_interval_seconds,
            "metrics": self.config.metrics_interval_seconds,
            "summary": self.config.summary_interval_seconds,
            "inventory": self.config.inventory_interval_seconds,
        }

    @functools.cached_property
    def fraction(self) -> float:
        """The node's own place in [0, 1) of its report intervals (and the stretch of its quiet floors), from its name:
        computed once, it is asked at every report."""
        return (uuid.uuid5(RESULT_NAMESPACE, self.node).int % 1000) / 1000

    @functools.cached_property
    def metrics_subject(self) -> str:
        """`eru.metrics.<node>` (checked once)."""
        return metrics(self.node)

    @functools.cached_property
    def inventory_subject(self) -> str:
        """`eru.node.<node>.inventory` (checked once)."""
        return node_inventory(self.node)

    def report_offset(self, interval: float) -> float:
        """When in its interval this node reports: many simulated nodes spread over it instead of firing together."""
        return self.fraction * interval

    async def report(self, action: str, interval: float) -> None:
        """One periodic report (`report_intervals`); a failure is logged, never raised (a lost sample must not stop
        the agent)."""
        try:
            if action == "metrics":
                await self.metrics_once(interval)
            elif action == "summary":
                self.summary_once()
            elif action == "inventory":
                await self.inventory_once(periodic=True)
            else:
                await self.heartbeat_once()
        except Exception as error:
            self._log.warning(f"node_agent.{action}_failed", error=f"{type(error).__name__}: {error}")

    async def _every(self, interval: float, action: str, stop: asyncio.Event) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=self.report_offset(interval))
        loop = asyncio.get_running_loop()
        due = loop.time()
        while not stop.is_set():
            await self.report(action, interval)
            # Fixed rate: the engine's stats may take a second to answer, which must not stretch the interval.
            due = max(due + interval, loop.time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=due - loop.time())

    async def run(
        self, stop: asyncio.Event, *, own_reports: bool = True, starts: asyncio.Semaphore | None = None
    ) -> None:
        """Start (`eru_node_agent.starting.start_until_done`), then serve commands, heartbeats and metrics until stop.
        Without `own_reports` the periodic reports are left to the caller (`eru_node_agent.periodic.Reports`, one
        timer for every node of a process); a grouped node's commands come through its process's group consumer."""
        if not await start_until_done(self, stop, starts):
            return
        if self.grouped:
            self.started.set()
            if own_reports:
                await asyncio.gather(*(self._every(i, a, stop) for a, i in self.report_intervals().items()))
            return
        self.consumer = Consumer(
            self.js,
            NODE,
            self.config.durable,
            node_commands(self.node),
            NodeCommandMessage,
            self.handle,
            options=self.consumer_options,
            stop=stop,
        )
        self.started.set()
        # Without own reports no loop is built at all: a coroutine made and dropped is never awaited (a warning).
        intervals = self.report_intervals().items() if own_reports else ()
        loops = [self._every(interval, action, stop) for action, interval in intervals]
        await asyncio.gather(self.consumer.run(), *loops)
