"""The node-agent service's main: one agent for the local Docker engine, or many simulated nodes in one process."""

from __future__ import annotations

import asyncio
import contextlib

import structlog
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from eru.bus.errors import BusError
from eru.bus.streams import DLQ, EVENTS, METRICS, NODE, provision_streams, streams_for
from eru.errors import InvalidInput
from eru.nodeagent.load import parse_load
from eru.service import ServiceContext
from eru.settings import Settings
from eru.stack.auth import sim_node_names
from eru_node_agent.agent import NodeAgent
from eru_node_agent.attach import AttachServer
from eru_node_agent.config import AgentConfig
from eru_node_agent.group import CommandGroup
from eru_node_agent.periodic import Reports
from eru_node_agent.runtime.base import Runtime
from eru_node_agent.runtime.docker import DockerRuntime
from eru_node_agent.runtime.sim import SimRuntime
from eru_node_agent.starting import CONCURRENT_STARTS
from eru_node_agent.state import FileStateStore, MemoryStateStore, StateStore

log = structlog.get_logger()
USED_STREAMS = (NODE, EVENTS, METRICS, DLQ)
# A process serving many sim nodes checks each node's command consumer less often (docs/node-agent.md "Many simulated
# nodes in one process"): at 1,000 nodes the default was 500 consumer-infos a second with nothing to do. The fetch
# timeout stays 1 s: with nats-py's batch fetch a longer one delays a command behind a lingering pull request (i19's
# finding, notes/requests.md 02:05), until `Consumer._fetch` no longer waits on it.
MANY_NODES = 100
QUIET_FETCH_SECONDS = 1.0
QUIET_HEAL_SECONDS = 10.0


async def ensure_streams(js: JetStreamContext, settings: Settings) -> None:
    """Check that the streams exist and capture every subject the agent uses; provision them only otherwise.

    Under `eru up`'s access control a node agent may read stream metadata but not create streams (the stack
    provisions them), so the common path is metadata only.
    """
    for spec in streams_for(settings):
        if spec.name not in USED_STREAMS:
            continue
        try:
            info = await js.stream_info(spec.name)
        except NotFoundError:
            missing = f"stream {spec.name}"
        else:
            uncovered = set(spec.subjects) - set(info.config.subjects or [])
            if not uncovered:
                continue
            missing = f"subjects {sorted(uncovered)} of {spec.name}"
        log.info("node_agent.provisioning_streams", missing=missing)
        try:
            await provision_streams(js, streams_for(settings))
        except (NatsError, TimeoutError) as error:
            raise BusError(
                f"{missing} is missing and this account could not provision it ({type(error).__name__}); "
                "provision the streams first (eru up, or eru.bus.provision_streams as admin)"
            ) from None
        return


def build_agents(settings: Settings, js: JetStreamContext) -> list[NodeAgent]:
    """The agents this process runs, from its settings."""
    na = settings.node_agent
    share_base = settings.planning.share_base
    agents: list[NodeAgent] = []
    default_load = parse_load(na.sim_load, field="node_agent.sim_load") if na.sim_load else None
    if na.command_group is not None and na.runtime != "sim":
        raise InvalidInput("node_agent.command_group", "only the sim runtime serves its nodes through a command group")
    names = sim_node_names(na.node, na.sim_nodes) if na.runtime == "sim" else [na.node]
    quiet = len(names) > MANY_NODES
    grouped = na.command_group is not None
    for name in names:
        runtime: Runtime
        store: StateStore
        if na.runtime == "sim":
            runtime = SimRuntime(
                name,
                seed=na.sim_seed,
                share_base=share_base,
                memory_fraction=na.memory_fraction,
                cpu_cores=na.cpu_cores,
                memory=na.memory,
                default_load=default_load,
            )
            store = MemoryStateStore()
        else:
            runtime = DockerRuntime(
                url=na.docker_url,
                share_base=share_base,
                memory_fraction=na.memory_fraction,
                cpu_cores=na.cpu_cores,
                memory=na.memory,
                node=name,
            )
            store = FileStateStore(settings.state_dir / "node-agent" / f"{name}.json")
        config = AgentConfig(
            node=name,
            pod=na.pod,
            share_base=share_base,
            metrics_interval_seconds=na.metrics_interval_seconds,
            heartbeat_interval_seconds=na.heartbeat_interval_seconds,
            inventory_interval_seconds=settings.inventory_seconds,
            max_concurrent_commands=na.max_concurrent_commands,
            engine_concurrency=na.engine_concurrency,
            stop_timeout_seconds=na.stop_timeout_seconds,
            summary_interval_seconds=na.summary_interval_seconds,
            fetch_timeout_seconds=QUIET_FETCH_SECONDS if quiet else 1.0,
            heal_check_seconds=QUIET_HEAL_SECONDS if quiet else 2.0,
        )
        agents.append(NodeAgent(config, runtime, js, store, grouped=grouped))
    return agents


def run_agents(
    agents: list[NodeAgent], stop: asyncio.Event, *, shared: bool, group: str | None = None
) -> list[asyncio.Task[None]]:
    """Every agent's task, started as a node-agent process starts them: at most `CONCURRENT_STARTS` nodes start at
    once and a failed start is retried (`eru_node_agent.starting`); with `shared`, every node's periodic reports come
    from one timer (`eru_node_agent.periodic.Reports`) instead of four loops per node, the summary one line for the
    process and, with a command `group`, the heartbeats and inventories one message for all of its nodes."""
    starts = asyncio.Semaphore(CONCURRENT_STARTS)
    reports = Reports(agents, stop, group) if shared else None  # before the nodes start (their first inventories)
    tasks = [
        asyncio.create_task(agent.run(stop, own_reports=not shared, starts=starts), name=f"agent-{agent.node}")
        for agent in agents
    ]
    if reports is not None:
        tasks.append(asyncio.create_task(reports.run(), name="reports"))
    return tasks


async def service_main(ctx: ServiceContext) -> None:
    """Check the streams, run every agent until the runner asks to stop, then close the runtimes."""
    settings = ctx.settings
    await ensure_streams(ctx.js, settings)
    agents = build_agents(settings, ctx.js)
    log.info("node_agent.starting", runtime=settings.node_agent.runtime, nodes=len(agents))
    shared = settings.node_agent.runtime == "sim"  # many nodes: one timer for all their reports
    group = settings.node_agent.command_group
    if group is not None:  # one consumer for every node's commands, there before any node registers
        commands = CommandGroup(group, agents, ctx.js, ctx.stopping)
        await commands.ensure()
    tasks = run_agents(agents, ctx.stopping, shared=shared, group=group)
    attach = AttachServer(ctx.nc, agents, "node-agent")  # `eru container logs|exec`, `eru run` (docs/node-agent.md)
    await attach.start()
    if group is not None:
        tasks.append(asyncio.create_task(commands.run(), name="command-group"))

    async def mark_ready_then_report_load() -> None:
        await asyncio.gather(*(agent.started.wait() for agent in agents))
        ctx.ready.set()
        log.info("node_agent.ready", nodes=len(agents))
        while not ctx.stopping.is_set():  # what `eru status` shows ($SRV.STATS)
            ctx.load.update(
                nodes=float(len(agents)),
                containers=float(sum(len(agent.state.containers) for agent in agents)),
                commands=float(sum(agent.commands_done for agent in agents)),
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ctx.stopping.wait(), timeout=2.0)

    ready = asyncio.create_task(mark_ready_then_report_load())
    try:
        await asyncio.gather(*tasks)
    finally:
        ready.cancel()
        await attach.stop()
        for agent in agents:
            await agent.runtime.close()
