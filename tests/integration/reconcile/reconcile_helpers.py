"""A real allocator (in-process) over real servers, and real node agents whose process can be 'killed'."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from eru.bus import connect, new_envelope, request
from eru.bus.codec import decode
from eru.bus.streams import provision_streams
from eru.bus.subjects import DEPLOY_REQUEST, allocator_operation
from eru.domain import Accepted, DeployEvent, DeployRequest
from eru.domain.inventory import ReconcileRequest
from eru.domain.messages import OperationReply
from eru.settings import load_settings
from eru.store import create_pool
from eru_allocator.app import Allocator
from eru_distributor.app import start_distributor
from eru_node_agent.agent import NodeAgent
from eru_node_agent.config import AgentConfig
from eru_node_agent.runtime.base import Runtime
from eru_node_agent.state import MemoryStateStore, StateStore

TERMINAL = ("completed", "partial", "failed")


async def poll(probe: Callable[[], Any], check: Callable[[Any], bool], within: float = 20.0) -> Any:
    """The first value of `probe()` that passes `check`, polling until `within` seconds have passed."""
    deadline = time.monotonic() + within
    while True:
        value = await probe()
        if check(value):
            return value
        assert time.monotonic() < deadline, f"timed out; last value {value!r}"
        await asyncio.sleep(0.1)


class Stack:
    """One allocator replica (reconciler on, short grace) and a distributor, in this event loop."""

    def __init__(self, nats_url: str, dsn: str) -> None:
        self.nats_url = nats_url
        self.dsn = dsn
        self.terminal: dict[str, DeployEvent] = {}
        self._closers: list[Any] = []

    async def start(self, allocator: dict[str, Any] | None = None, **reconcile: Any) -> None:
        """The allocator and a distributor on the test's bus and database; `allocator`: settings of its section
        (e.g. a sweep that never runs during the test), `reconcile`: the reconciler's."""
        self.nc = await connect(self.nats_url, name="test")
        self.js = self.nc.jetstream()
        await provision_streams(self.js)
        self.pool = await create_pool(self.dsn, min_size=1, max_size=4)
        await self.nc.subscribe("eru.deploy.*.*", cb=self._on_deploy_event)
        distributor_nc = await connect(self.nats_url, name="distributor")
        server = await start_distributor(distributor_nc, source="distributor/test")
        settings = load_settings(
            replica="r0",
            bus={"url": self.nats_url},
            store={"dsn": self.dsn, "pool_max": 6},
            allocator={"ack_wait_seconds": 5.0, **(allocator or {})},
            reconcile={"grace_seconds": 0.5, **reconcile},
            inventory_seconds=1.0,
        )
        allocator_nc = await connect(self.nats_url, name="allocator")
        allocator_pool = await create_pool(self.dsn, min_size=1, max_size=6)
        self.allocator = Allocator(allocator_pool, allocator_nc, settings)
        await self.allocator.start()
        self._closers = [self.allocator.stop, allocator_nc.close, allocator_pool.close, server.stop]
        self._closers.append(distributor_nc.close)

    async def close(self) -> None:
        for closer in self._closers:
            with contextlib.suppress(Exception):
                await closer()
        await self.nc.close()
        await self.pool.close()

    async def _on_deploy_event(self, msg: Any) -> None:
        if msg.subject == DEPLOY_REQUEST:
            return
        event = decode(msg.data, DeployEvent)
        if event.kind in TERMINAL:
            self.terminal[event.deploy_id] = event

    async def deploy(self, node_pod: str, count: int, image: str = "busybox", **workload: Any) -> DeployEvent:
        body = DeployRequest.model_validate(
            {
                "pod": node_pod,
                "count": count,
                "workload": {
                    "name": "rc",
                    "image": image,
                    "resources": {"cpu_request": 0.1, "memory_request": "16MiB"},
                    **workload,
                },
            }
        )
        envelope = new_envelope("eru.deploy.request", "test")
        reply = await request(self.nc, DEPLOY_REQUEST, body, Accepted, envelope=envelope, timeout=20.0)
        deploy_id = reply.deploy_id
        await poll(lambda: asyncio.sleep(0, self.terminal.get(deploy_id)), lambda e: e is not None, 30.0)
        return self.terminal[deploy_id]

    async def registered(self, node: str) -> None:
        """Until the allocator has recorded the node's registration."""
        await poll(lambda: self.pool.fetchval("SELECT count(*) FROM nodes WHERE name = $1", node), lambda n: n == 1)

    async def states(self, node: str) -> dict[str, str]:
        rows = await self.pool.fetch("SELECT id, state FROM containers WHERE node = $1", node)
        return {row["id"]: row["state"] for row in rows}

    async def used_memory(self, node: str) -> int:
        value: int = await self.pool.fetchval("SELECT used_memory FROM nodes WHERE name = $1", node)
        return value

    async def reconcile(self, **fields: Any) -> OperationReply:
        subject = allocator_operation("reconcile")
        reply: OperationReply = await request(
            self.nc, subject, ReconcileRequest(**fields), OperationReply, timeout=20.0
        )
        return reply


@contextlib.asynccontextmanager
async def agent_process(
    js: Any, runtime: Runtime, node: str, pod: str, store: StateStore | None = None, **config: Any
) -> AsyncIterator[NodeAgent]:
    """A node agent as its own 'process': leaving the block without `stop` is a kill -9 (nothing is said, no state
    is saved beyond what the agent saved as it went)."""
    settings = {
        "pod": pod,
        "metrics_interval_seconds": 5.0,
        "heartbeat_interval_seconds": 60.0,  # the agent's own vanish check must not be what finds the loss
        "inventory_interval_seconds": 1.0,
        "stop_timeout_seconds": 0.5,
    }
    agent = NodeAgent(AgentConfig(node=node, **{**settings, **config}), runtime, js, store or MemoryStateStore())
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        await asyncio.wait_for(agent.started.wait(), timeout=30)
        yield agent
    finally:
        task.cancel()  # killed: no drain, no goodbye
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        await runtime.close()
