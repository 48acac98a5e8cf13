"""A real deploy pipeline for tests: allocator replicas and a distributor on a real nats-server and PostgreSQL.

`ScriptedNodeAgent` is a test stand-in for node agents that speaks the real bus contract: it consumes the node
commands the allocator publishes (through the outbox and JetStream) and answers with `ContainerEvent`s, failing the
containers a test asks it to fail. Tests that need the real agent use the sim runtime instead (tests/e2e).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import asyncpg

from eru.bus import connect, new_envelope, publish, request
from eru.bus.codec import decode
from eru.bus.streams import provision_streams
from eru.bus.subjects import DEPLOY_REQUEST, allocator_operation, container_event, node_heartbeat, node_registration
from eru.domain import (
    Accepted,
    ContainerEvent,
    ContainerEvents,
    DeployEvent,
    DeployRequest,
    Heartbeat,
    NodeCommand,
    NodeCommandMessage,
    NodeCommands,
    NodeRegistration,
)
from eru.domain.messages import OperationReply
from eru.settings import Settings, load_settings
from eru.store import create_pool
from eru_allocator.app import Allocator
from eru_distributor.app import start_distributor

TERMINAL = ("completed", "partial", "failed")
GiB = 1024**3
# A registered node heartbeats like a real agent: without it, a node counts as down `node_down_after_seconds` (30)
# after its registration, and a test that runs longer than that on a loaded machine finds no schedulable node.
HEARTBEAT_SECONDS = 5.0  # Pipeline.heartbeat_seconds


def allocator_settings(
    replica: str, nats_url: str, dsn: str, overrides: dict[str, Any] | None = None, **allocator: Any
) -> Settings:
    """Settings of one in-process allocator replica (`overrides`: top-level settings such as store_retry_seconds)."""
    return load_settings(
        replica=replica,
        bus={"url": nats_url},
        store={"dsn": dsn, "pool_max": 6},
        allocator={"ack_wait_seconds": 5.0, **allocator},
        **(overrides or {}),
    )


class ScriptedNodeAgent:
    """Answers node commands like a node agent would; `fail` decides which created containers fail (and why)."""

    def __init__(
        self,
        nc: Any,
        fail: Callable[[NodeCommand], str | None] | None = None,
        silent: Callable[[NodeCommand], bool] | None = None,
        *,
        batched: bool = False,
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.fail = fail or (lambda _command: None)
        self.silent = silent or (lambda _command: False)  # commands never answered (a node that went away)
        self.commands: list[NodeCommand] = []
        self.subjects: list[str] = []  # of every command message received
        self.batch_ids: list[str] = []  # of the batches answered with one message
        self.batched = batched  # answer a batch of commands with one ContainerEvents, as the real agent does
        self._subscription: Any = None

    async def start(self) -> None:
        self._subscription = await self.nc.subscribe("eru.node.*.cmd.*", cb=self._on_command)

    async def stop(self) -> None:
        if self._subscription is not None:
            await self._subscription.unsubscribe()

    async def _on_command(self, msg: Any) -> None:
        self.subjects.append(msg.subject)
        message = decode(msg.data, NodeCommandMessage)
        if self.batched and isinstance(message.root, NodeCommands):
            batch = message.root
            self.commands += batch.commands
            self.batch_ids.append(batch.batch_id)
            events = [self.event_for(command) for command in batch.commands if not self.silent(command)]
            if events:
                envelope = new_envelope("eru.container.batch", f"node-agent/{batch.node}", message_id=batch.batch_id)
                report = ContainerEvents(node=batch.node, events=events)
                await publish(self.js, container_event(batch.node, "batch"), report, envelope)
            return
        # otherwise each command is answered on its own, whether it came alone or in a batch
        for command in message.commands():
            self.commands.append(command)
            if not self.silent(command):
                await self.answer(command)

    async def answer(self, command: NodeCommand) -> None:
        """Report the outcome of `command` (tests call it for a command answered late)."""
        event = self.event_for(command)
        envelope = new_envelope(
            f"eru.container.{event.kind}", f"node-agent/{command.node}", message_id=command.command_id
        )
        await publish(self.js, container_event(command.node, event.kind), event, envelope)

    def event_for(self, command: NodeCommand) -> ContainerEvent:
        """The event a node agent would report for `command`."""
        kind, reason, target = "removed", "", command.container_id
        replaced = None
        if command.kind == "create":
            reason = self.fail(command) or ""
            kind = "failed" if reason else "started"
        elif command.kind in ("update", "suppress"):
            reason = self.fail(command) or ""
            kind = "failed" if reason else "updated"
        elif command.kind == "replace":
            assert command.replacement is not None
            kind, target, replaced = "replaced", command.replacement.container_id, command.container_id
        return ContainerEvent(
            node=command.node,
            container_id=target,
            deploy_id=command.spec.deploy_id if command.spec else None,
            command_id=command.command_id,
            kind=kind,  # type: ignore[arg-type]
            reason=reason,
            command_kind=command.kind,
            replaced_container_id=replaced,
        )


# Every request with a reply address is answered (docs/bus.md), so a test waits for its answer, its terminal event or
# its condition; the default deadline only guards a hang. It is no speed check (speed lives in bench/): 10–20 s
# defaults turned into one under `stress --cpu 2` at load 30–40. A test that checks a bound the docs promise (a
# consumer back within 5 s) passes that bound itself.
HANG_GUARD_SECONDS = 60.0
T = TypeVar("T")
# A burst's answers may come slowly on a loaded machine (2 per second at load 40), but they keep coming: a burst fails
# when nothing at all is answered for this long, never because its last answer is late.
STALL_SECONDS = 30.0


async def eru_cli(*args: str, columns: int = 200) -> tuple[int, str]:
    """Run the `eru` CLI as a process (the allocator runs in this event loop, so never block it): exit code and
    output (stdout and stderr together), tables `columns` wide."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "eru.cli",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "COLUMNS": str(columns)},
    )
    output, _ = await process.communicate()
    return process.returncode or 0, output.decode()


async def while_progressing(awaitables: list[Awaitable[T]], stall_seconds: float = STALL_SECONDS) -> list[T]:
    """Every result of `awaitables` (in order), waiting as long as one of them finishes at least every
    `stall_seconds`; an `AssertionError` naming how many are still open when none does (the system stopped)."""
    tasks = [asyncio.ensure_future(awaitable) for awaitable in awaitables]
    pending = set(tasks)
    try:
        while pending:
            done, pending = await asyncio.wait(pending, timeout=stall_seconds, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                raise AssertionError(f"no progress for {stall_seconds:g}s: {len(pending)} of {len(tasks)} still open")
            for task in done:
                task.result()  # the first failure fails the burst
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    return [task.result() for task in tasks]


class Pipeline:
    """Allocator replicas + a distributor + a deploy-event recorder, all on real servers."""

    def __init__(self, nats_url: str, dsn: str) -> None:
        self.nats_url = nats_url
        self.dsn = dsn
        self.events: dict[str, list[DeployEvent]] = {}
        self.allocators: list[Allocator] = []
        self._closers: list[Any] = []
        self._terminal: dict[str, asyncio.Event] = {}
        self.overrides: dict[str, Any] = {}  # top-level settings of every allocator started later
        self._heartbeats: dict[str, asyncio.Task[None]] = {}
        self.heartbeat_seconds = HEARTBEAT_SECONDS

    async def start(self, replicas: int = 1, *, distributor: bool = True, **allocator: Any) -> None:
        self.nc = await connect(self.nats_url, name="test-client")
        self.js = self.nc.jetstream()
        await provision_streams(self.js)
        self.pool = await create_pool(self.dsn, min_size=1, max_size=4)
        await self.nc.subscribe("eru.deploy.*.*", cb=self._on_deploy_event)
        if distributor:
            distributor_nc = await connect(self.nats_url, name="distributor")
            server = await start_distributor(distributor_nc, source="distributor/test")
            self._closers += [server.stop, distributor_nc.close]
        for index in range(replicas):
            await self.add_allocator(f"r{index}", **allocator)

    async def add_allocator(self, replica: str, **allocator: Any) -> Allocator:
        settings = allocator_settings(replica, self.nats_url, self.dsn, self.overrides, **allocator)
        nc = await connect(self.nats_url, name=f"allocator-{replica}")
        pool = await create_pool(self.dsn, min_size=1, max_size=6)
        instance = Allocator(pool, nc, settings)
        await instance.start()
        self.allocators.append(instance)
        self._closers += [instance.stop, nc.close, pool.close]
        return instance

    async def close(self) -> None:
        for task in self._heartbeats.values():
            task.cancel()
        await asyncio.gather(*self._heartbeats.values(), return_exceptions=True)
        for closer in self._closers:
            with contextlib.suppress(Exception):
                await closer()
        await self.nc.close()
        await self.pool.close()

    async def _on_deploy_event(self, msg: Any) -> None:
        if msg.subject == DEPLOY_REQUEST:
            return
        event = decode(msg.data, DeployEvent)
        self.events.setdefault(event.deploy_id, []).append(event)
        if event.kind in TERMINAL:
            self._terminal.setdefault(event.deploy_id, asyncio.Event()).set()

    async def register(
        self, name: str, pod: str = "p1", cores: int = 4, memory: int = 8 * GiB, *, beat: bool = True, **extra: Any
    ) -> None:
        """Register node `name` and (with `beat`) heartbeat it until the pipeline closes, as its agent would."""
        registration = NodeRegistration(
            node=name, pod=pod, cpu_map={str(i): 100 for i in range(cores)}, memory=memory, runtime="sim", **extra
        )
        envelope = new_envelope("eru.node.registered", f"node-agent/{name}")
        await publish(self.js, node_registration(name), registration, envelope)
        await self.wait_for(lambda: self.pool.fetchval("SELECT count(*) FROM nodes WHERE name = $1", name), 1)
        if beat and name not in self._heartbeats:
            self._heartbeats[name] = asyncio.create_task(self._heartbeat(name), name=f"heartbeat-{name}")

    async def _heartbeat(self, name: str) -> None:
        """Heartbeat `name` every `heartbeat_seconds` until the pipeline closes, as its agent would."""
        while True:
            await asyncio.sleep(self.heartbeat_seconds)
            with contextlib.suppress(Exception):  # the bus may be going away at the end of a test
                envelope = new_envelope("eru.node.heartbeat", f"node-agent/{name}")
                await publish(self.js, node_heartbeat(name), Heartbeat(node=name), envelope)

    async def wait_for(self, probe: Callable[[], Any], expected: Any, within: float = HANG_GUARD_SECONDS) -> Any:
        async with asyncio.timeout(within):
            while True:
                value = await probe()
                if value == expected:
                    return value
                await asyncio.sleep(0.05)

    async def deploy(self, within: float = HANG_GUARD_SECONDS, **fields: Any) -> str:
        fields.setdefault("pod", "p1")
        fields.setdefault("workload", {"name": "web", "image": "busybox"})
        req = DeployRequest.model_validate(fields)
        accepted = await request(self.nc, DEPLOY_REQUEST, req, Accepted, within)
        return accepted.deploy_id

    async def terminal(self, deploy_id: str, within: float = HANG_GUARD_SECONDS) -> DeployEvent:
        async with asyncio.timeout(within):
            await self._terminal.setdefault(deploy_id, asyncio.Event()).wait()
        return next(e for e in self.events[deploy_id] if e.kind in TERMINAL)

    async def op(self, name: str, model: Any, within: float = HANG_GUARD_SECONDS) -> OperationReply:
        return await request(self.nc, allocator_operation(name), model, OperationReply, within)

    async def containers(self, **where: Any) -> list[asyncpg.Record]:
        clauses = " AND ".join(f"{key} = ${i + 1}" for i, key in enumerate(where)) or "true"
        return list(await self.pool.fetch(f"SELECT * FROM containers WHERE {clauses} ORDER BY id", *where.values()))


async def assert_usage_consistent(pool: asyncpg.Pool, shrunk: frozenset[str] = frozenset()) -> None:
    """Per node: usage = Σ allocations of the containers that hold resources; no core beyond its pieces (except on
    `shrunk` nodes, whose capacity an operator lowered under their usage)."""
    nodes = await pool.fetch("SELECT * FROM nodes")
    for node in nodes:
        rows = await pool.fetch(
            "SELECT allocation FROM containers WHERE node = $1 AND state NOT IN ('removed', 'failed', 'lost') "
            "AND replaces IS NULL",
            node["name"],
        )
        cpu: dict[str, int] = {}
        memory = 0
        for row in rows:
            allocation = json.loads(row["allocation"])
            for core, pieces in allocation["cpu_map"].items():
                cpu[core] = cpu.get(core, 0) + pieces
            memory += allocation["memory"]
        used = {k: int(v) for k, v in json.loads(node["used_cpu_map"]).items()}
        assert used == cpu, (node["name"], used, cpu)
        assert node["used_memory"] == memory, (node["name"], node["used_memory"], memory)
        if node["name"] in shrunk:
            continue
        capacity = json.loads(node["cpu_map"])
        for core, pieces in used.items():
            assert pieces <= capacity[core], (node["name"], core, pieces, capacity[core])
        assert memory <= node["memory"]


class SimNodes:
    """The real node agent with the sim runtime (eru_node_agent), `count` nodes in this process."""

    def __init__(self, nats_url: str, *, count: int, pod: str = "p1", cores: int = 8, memory: int = 16 * GiB) -> None:
        from eru_node_agent.app import build_agents

        self.nats_url = nats_url
        self.settings = load_settings(
            replica="sim-agents",
            bus={"url": nats_url},
            node_agent={
                "runtime": "sim",
                "node": "sim",
                "pod": pod,
                "sim_nodes": count,
                "cpu_cores": cores,
                "memory": memory,
                "metrics_interval_seconds": 30,
                "heartbeat_interval_seconds": 2,
            },
        )
        self._build = build_agents
        self.stop_event = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self.nc = await connect(self.nats_url, name="sim-agents")
        self.agents = self._build(self.settings, self.nc.jetstream())
        self.tasks = [asyncio.create_task(agent.run(self.stop_event)) for agent in self.agents]
        async with asyncio.timeout(20):
            await asyncio.gather(*(agent.started.wait() for agent in self.agents))

    async def stop(self) -> None:
        self.stop_event.set()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for agent in self.agents:
            await agent.runtime.close()
        await self.nc.close()


@contextlib.asynccontextmanager
async def pipeline_with_sim_nodes(
    nats_url: str, dsn: str, *, count: int, cores: int = 4, memory: int = 8 * GiB
) -> AsyncIterator[Pipeline]:
    """A started pipeline with the real node agent (sim runtime) serving `count` nodes, all registered."""
    pipe = Pipeline(nats_url, dsn)
    await pipe.start()
    sims = SimNodes(nats_url, count=count, cores=cores, memory=memory)
    await sims.start()
    try:
        await pipe.wait_for(lambda: pipe.pool.fetchval("SELECT count(*) FROM nodes"), count)
        yield pipe
    finally:
        await sims.stop()
        await pipe.close()


ScriptedPipeline = Callable[..., Awaitable[tuple[Pipeline, ScriptedNodeAgent]]]
"""The `scripted_pipeline` fixture (conftest.py): `await scripted_pipeline(nodes, start=…, **agent)`."""


@contextlib.asynccontextmanager
async def pipeline_with_scripted_agent(
    nats_url: str,
    dsn: str,
    nodes: Sequence[str] | Mapping[str, Mapping[str, Any]] = ("n1", "n2", "n3"),
    *,
    start: Mapping[str, Any] | None = None,
    **agent: Any,
) -> AsyncIterator[tuple[Pipeline, ScriptedNodeAgent]]:
    """A pipeline started with `start` (`Pipeline.start`'s options) and a `ScriptedNodeAgent(**agent)` answering for
    `nodes`, all registered: names (pod p1, 4 cores, 8 GiB), or names → `Pipeline.register` options."""
    pipe = Pipeline(nats_url, dsn)
    await pipe.start(**(start or {}))
    scripted = ScriptedNodeAgent(pipe.nc, **agent)
    await scripted.start()
    try:
        for name in nodes:
            await pipe.register(name, **(nodes[name] if isinstance(nodes, Mapping) else {}))
        yield pipe, scripted
    finally:
        await scripted.stop()
        await pipe.close()


async def recorded(nc: Any, subject: str, model: Any = None) -> list[Any]:
    """What is published on `subject` from now on, in order: each body decoded as `model`, or its subject when
    `model` is None (a core subscription: it sees what is published, stored or not)."""
    items: list[Any] = []

    async def on_message(msg: Any) -> None:
        items.append(msg.subject if model is None else decode(msg.data, model))

    await nc.subscribe(subject, cb=on_message)
    return items


@contextlib.asynccontextmanager
async def sim_group(
    nats_url: str, nodes: int, *, consume: bool = True, inventory_seconds: float = 30.0, **node_agent: Any
) -> AsyncIterator[list[Any]]:
    """A sim process of command group `grp` serving `nodes` nodes (`grp-001` …) in this process, as `service_main`
    runs it: its agents started, its group consumer ensured and (`consume`) run; stopped on exit. `node_agent`
    overrides its settings (heartbeats every 0.5 s, metrics every 30 s)."""
    from eru_node_agent.app import build_agents, run_agents
    from eru_node_agent.group import CommandGroup

    settings = load_settings(
        replica="grp",
        bus={"url": nats_url},
        inventory_seconds=inventory_seconds,
        node_agent={
            "runtime": "sim",
            "node": "grp",
            "command_group": "grp",
            "pod": "p1",
            "sim_nodes": nodes,
            "heartbeat_interval_seconds": 0.5,
            "metrics_interval_seconds": 30,
            **node_agent,
        },
    )
    nc = await connect(nats_url, name="grp-agents")
    js = nc.jetstream()
    await provision_streams(js)
    agents = build_agents(settings, js)
    stop = asyncio.Event()
    commands = CommandGroup("grp", agents, js, stop)
    await commands.ensure()
    tasks = run_agents(agents, stop, shared=True, group="grp")
    if consume:
        tasks.append(asyncio.create_task(commands.run()))
    try:
        yield agents
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        for agent in agents:
            await agent.runtime.close()
        await nc.close()
