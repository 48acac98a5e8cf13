"""Helpers of the node-agent integration tests: run an agent, send commands, collect what it publishes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from eru.bus import decode, new_envelope, new_id, provision_streams, publish
from eru.bus.subjects import node_command
from eru.domain.messages import ContainerSpec, NodeCommand, Workload
from eru.domain.resources import Allocation
from eru_node_agent.agent import NodeAgent
from eru_node_agent.config import AgentConfig
from eru_node_agent.runtime.base import Runtime
from eru_node_agent.state import MemoryStateStore, StateStore

M = TypeVar("M", bound=BaseModel)


class Collector:
    """Every message on a subject (core NATS subscription; JetStream publishes reach it too), decoded."""

    def __init__(self, model: type[M]) -> None:
        self.model = model
        self.items: list[tuple[str, Any, dict[str, str]]] = []
        self.changed = asyncio.Event()
        self.subscription: Any = None

    async def start(self, nc: Any, subject: str) -> Collector:
        async def on_message(msg: Any) -> None:
            model = decode(msg.data, self.model, (msg.headers or {}).get("Content-Type"))
            self.items.append((msg.subject, model, dict(msg.headers or {})))
            self.changed.set()

        self.subscription = await nc.subscribe(subject, cb=on_message)
        return self

    def models(self) -> list[Any]:
        return [model for _, model, _ in self.items]

    async def wait_for(self, predicate: Callable[[Any], bool], timeout: float = 30.0) -> Any:  # noqa: ASYNC109
        """The first collected model matching `predicate`, waiting for it up to `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            for model in self.models():
                if predicate(model):
                    return model
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"nothing matched within {timeout}s; got {self.models()}")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), timeout=min(remaining, 0.5))

    async def wait_until(self, condition: Callable[[], bool], timeout: float = 30.0) -> None:  # noqa: ASYNC109
        """Wait up to `timeout` seconds until `condition()` holds, asking it once per batch of new messages (a
        condition over every message collected, asked per message by `wait_for`, costs n² and starves the loop)."""
        deadline = time.monotonic() + timeout
        while not condition():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"not within {timeout}s; {len(self.items)} collected")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), timeout=min(remaining, 0.5))


def workload(image: str, *command: str, **fields: Any) -> Workload:
    """A workload of the test image (network none by default)."""
    return Workload(name=fields.pop("name", "w"), image=image, command=list(command), **fields)


def create(node: str, spec_workload: Workload, allocation: Allocation, container_id: str | None = None) -> NodeCommand:
    """A create command for a new container."""
    cid = container_id or f"c{new_id().replace('-', '')[-16:]}"
    spec = ContainerSpec(container_id=cid, deploy_id="d1", workload=spec_workload, allocation=allocation)
    return NodeCommand(command_id=new_id(), node=node, kind="create", container_id=cid, spec=spec)


async def send(js: Any, command: NodeCommand, subject_node: str | None = None) -> None:
    """Publish a command on its node's subject (or on `subject_node`'s)."""
    subject = node_command(subject_node or command.node, command.kind)
    envelope = new_envelope(f"eru.node.cmd.{command.kind}", "test", message_id=new_id())
    await publish(js, subject, command, envelope)


@contextlib.asynccontextmanager
async def running_agent(
    js: Any, runtime: Runtime, node: str, store: StateStore | None = None, **config: Any
) -> AsyncIterator[NodeAgent]:
    """An agent serving `node` until the block ends."""
    await provision_streams(js)
    settings = {"metrics_interval_seconds": 1.0, "heartbeat_interval_seconds": 1.0, "stop_timeout_seconds": 1.0}
    agent = NodeAgent(AgentConfig(node=node, **{**settings, **config}), runtime, js, store or MemoryStateStore())
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        started = asyncio.create_task(agent.started.wait())
        await asyncio.wait({task, started}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()
        assert agent.started.is_set(), "agent did not start within 30s"
        yield agent
    finally:
        stop.set()
        try:
            await asyncio.wait_for(task, timeout=30)
        finally:
            await runtime.close()
