"""What one sim process's periodic reports cost per node, without the bus (docs/performance.md "Where the sim
agents' time goes at 5,000 nodes").

`--nodes` simulated nodes are built and started exactly as one `eru up` process builds them (`build_agents` with a
command group), each given `--containers` containers by create commands; publishing is replaced by a stub, so what
is measured is the process's own work per report: a heartbeat round (every node reconciled with its runtime, one
`NodeHeartbeats` built per 1,000 nodes), a metrics sample of every node and an inventory of every node. Each is run
`--rounds` times; the median CPU time per node (`time.process_time`) is printed as one JSON document.

Usage: python -m bench.bench_sim_reports [--nodes 2500] [--containers 0,1,10] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, cast

from eru.bus import new_id
from eru.domain.messages import ContainerSpec, NodeCommand, Workload
from eru.domain.resources import Allocation
from eru.logging import configure_logging
from eru.settings import load_settings
from eru_node_agent import agent as agent_module
from eru_node_agent import heartbeats, reports
from eru_node_agent.agent import NodeAgent
from eru_node_agent.app import build_agents

MIB = 1024 * 1024


async def _unsent(*_args: Any, **_kwargs: Any) -> None:
    """The stub every publication goes to."""


def _create(node: str) -> NodeCommand:
    cid = f"c{uuid.uuid4().hex[:16]}"
    spec = ContainerSpec(
        container_id=cid,
        deploy_id=f"d{cid}",
        workload=Workload(name="bench", image="sim"),
        allocation=Allocation(memory=64 * MIB),
    )
    return NodeCommand(command_id=new_id(), node=node, kind="create", container_id=cid, spec=spec)


async def started_agents(nodes: int, containers: int) -> list[NodeAgent]:
    """`nodes` sim agents of one group, started, each running `containers` containers."""
    for module, name in ((agent_module, "publish"), (heartbeats, "publish"), (reports, "publish")):
        setattr(module, name, _unsent)
    setattr(reports, "publish_value", _unsent)  # noqa: B010 - the stub replaces the module's import
    settings = load_settings(node_agent={"runtime": "sim", "sim_nodes": nodes, "node": "bench", "command_group": "b"})
    agents = build_agents(settings, js=cast(Any, None))
    for agent in agents:
        await agent.start()
        assert agent.executor is not None
        for _ in range(containers):
            await agent.executor.execute(_create(agent.node))
        agent.started.set()
    return agents


async def per_node(agents: list[NodeAgent], report: Callable[[], Awaitable[Any]], rounds: int) -> float:
    """Median CPU microseconds per node of `report` over `rounds`."""
    spent = []
    for _ in range(rounds):
        started = time.process_time()
        await report()
        spent.append(time.process_time() - started)
    return round(1e6 * statistics.median(spent) / len(agents), 1)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    results = []
    for containers in args.containers:
        agents = await started_agents(args.nodes, containers)

        async def metrics(agents: list[NodeAgent] = agents) -> None:
            for agent in agents:
                await agent.metrics_once(25.0)

        async def inventories(agents: list[NodeAgent] = agents) -> None:
            for agent in agents:
                await agent.inventory_once(periodic=True)

        async def beat(agents: list[NodeAgent] = agents) -> None:
            await heartbeats.group_heartbeat_once(agents, "b")

        results.append(
            {
                "containers_per_node": containers,
                "heartbeat_round_us_per_node": await per_node(agents, beat, args.rounds),
                "metrics_us_per_node": await per_node(agents, metrics, args.rounds),
                "inventory_us_per_node": await per_node(agents, inventories, args.rounds),
            }
        )
    return {"bench": "sim_reports", "nodes": args.nodes, "rounds": args.rounds, "results": results}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2500)
    parser.add_argument("--containers", type=lambda t: [int(x) for x in t.split(",")], default=[0, 1, 10])
    parser.add_argument("--rounds", type=int, default=7)
    return parser.parse_args(argv)


if __name__ == "__main__":
    configure_logging("bench", "bench", log_format="json", level="warning")
    print(json.dumps(asyncio.run(main(parse_args())), indent=2))
