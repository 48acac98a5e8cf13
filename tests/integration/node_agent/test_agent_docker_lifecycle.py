"""`eru container stop|start|restart|dissociate` on a real engine (docs/cli.md "Workloads"): the node commands the
allocator sends for them change what Docker runs, and a dissociated container stays on the engine, no longer eru's
in the agent's inventory."""

from __future__ import annotations

from typing import Any

import aiodocker
import pytest
from agent_helpers import Collector, create, running_agent, send, workload

from eru.bus import new_id
from eru.domain.messages import ContainerEvent, NodeCommand
from eru.domain.resources import Allocation
from eru.nodeagent.engine import engine_name
from eru_node_agent.inventory import list_entries
from eru_node_agent.runtime.docker import DockerRuntime

pytestmark = [pytest.mark.docker]
MiB = 1024**2


async def test_stop_start_restart_and_dissociate_change_the_engine(
    js: Any, nc: Any, busybox_image: str, docker_node: str, docker_engine: str | None
) -> None:
    node = docker_node
    events = await Collector(ContainerEvent).start(nc, f"eru.container.{node}.*")
    made = create(node, workload(busybox_image, "sleep", "600"), Allocation(cpu_map={"0": 40}, memory=16 * MiB))
    cid = made.container_id
    docker = aiodocker.Docker(url=docker_engine)

    async def engine_state() -> dict[str, Any]:
        state: dict[str, Any] = (await docker._query_json(f"containers/{engine_name(cid)}/json"))["State"]
        return state

    async def run(kind: str) -> ContainerEvent:
        command = NodeCommand(command_id=new_id(), node=node, kind=kind, container_id=cid)  # type: ignore[arg-type]
        await send(js, command)
        return await events.wait_for(lambda e: e.command_id == command.command_id)

    try:
        async with running_agent(js, DockerRuntime(url=docker_engine), node) as agent:
            await send(js, made)
            assert (await events.wait_for(lambda e: e.command_id == made.command_id)).kind == "started"
            assert (await engine_state())["Running"]

            assert (await run("stop")).kind == "stopped"
            stopped = await engine_state()
            assert (stopped["Running"], stopped["Status"]) == (False, "exited")

            started = await run("start")
            assert (started.kind, started.allocation) == ("started", made.spec.allocation if made.spec else None)
            first = await engine_state()
            assert first["Running"]

            assert (await run("restart")).kind == "started"
            again = await engine_state()
            assert again["Running"]
            assert again["StartedAt"] != first["StartedAt"]  # stopped and started again, the same container

            assert (await run("dissociate")).kind == "dissociated"
            assert (await engine_state())["Running"]  # the engine keeps it
            assert cid not in agent.state.containers
            entries = await list_entries(agent.runtime, node, set(), agent.state.containers, agent.state.dissociated)
            assert [(e.managed, e.state) for e in entries if e.container_id == engine_name(cid)] == [(False, "running")]
    finally:
        await docker.close()
