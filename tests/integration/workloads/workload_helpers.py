"""A real allocator and distributor (tests/integration/reconcile's Stack) with node agents that also serve logs and
exec (eru_node_agent.attach), and `eru` run as a person runs it, in its own process."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from tests.integration.reconcile.reconcile_helpers import Stack, agent_process, poll

from eru.bus import connect
from eru_node_agent.agent import NodeAgent
from eru_node_agent.attach import AttachServer
from eru_node_agent.runtime.base import Runtime

__all__ = ["Done", "Stack", "attached_agent", "eru", "poll", "tenant_url"]


@contextlib.asynccontextmanager
async def attached_agent(
    stack: Stack, runtime: Runtime, node: str, pod: str, **config: Any
) -> AsyncIterator[NodeAgent]:
    """A node agent (its own connection for the streams, as in its process) serving `eru.node.<node>.attach`."""
    async with agent_process(stack.js, runtime, node, pod, **config) as agent:
        nc = await connect(stack.nats_url, name=f"agent-{node}")
        server = AttachServer(nc, [agent], f"node-agent/{node}")
        await server.start()
        try:
            await stack.registered(node)
            yield agent, server
        finally:
            await server.stop()
            await nc.close()


@dataclass
class Done:
    """A finished `eru` process."""

    code: int
    out: str
    err: str


async def eru(*args: str, within: float = 60.0) -> Done:
    """`eru …` in its own process; its exit code, stdout and stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "eru.cli", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), within)
    assert process.returncode is not None
    return Done(process.returncode, out.decode(), err.decode())


def tenant_url(nats_url: str, tenant: str) -> str:
    """The URL a tenant's credentials make (`tenant-<name>` user): the CLI sends to the tenant's subjects (the test
    server checks no password; what is checked here is the allocator's rule, docs/security.md)."""
    return nats_url.replace("nats://", f"nats://tenant-{tenant}:unused@", 1)
