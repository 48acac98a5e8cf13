"""A batch's results are published as each command finishes, not after the last one (eru_node_agent.batches):
on a runtime whose starts take their time, at most `engine_concurrency` commands work on the engine at once, in the
order of the batch, and a redelivered batch neither runs nor reports a command twice. The bus is a fake JetStream
that records what is published (and can refuse one publication)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from eru.bus import Delivery, decode, new_envelope
from eru.bus.streams import NODE
from eru.domain.messages import ContainerEvents, ContainerSpec, NodeCommand, NodeCommandMessage, NodeCommands, Workload
from eru.domain.resources import Allocation
from eru.testing.deliveries import delivery as fake_delivery
from eru_node_agent.agent import NodeAgent
from eru_node_agent.config import AgentConfig, result_id
from eru_node_agent.runtime.sim import SimRuntime
from eru_node_agent.state import MemoryStateStore

NODE_NAME = "n1"
MiB = 1024**2


class FakeJetStream:
    """Records every publication; `refuse` makes the next publication carrying that container's result fail."""

    def __init__(self) -> None:
        self.published: list[tuple[str, bytes, dict[str, str]]] = []
        self.changed = asyncio.Event()
        self.refuse: str | None = None

    async def publish(
        self,
        subject: str,
        payload: bytes,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> None:
        if self.refuse is not None and subject.endswith(".batch") and self.refuse.encode() in payload:
            self.refuse = None
            raise ConnectionError("the bus refused it")
        self.published.append((subject, payload, dict(headers or {})))
        self.changed.set()

    def answers(self) -> list[ContainerEvents]:
        return [decode(body, ContainerEvents) for subject, body, _ in self.published if subject.endswith(".batch")]

    def reported(self) -> list[str]:
        return [event.container_id for answer in self.answers() for event in answer.events]

    async def wait_until(self, condition: Any) -> None:
        async with asyncio.timeout(10):
            while not condition():
                self.changed.clear()
                await self.changed.wait()


class GatedSim(SimRuntime):
    """A sim node whose engine calls each take a loop turn, whose starts of `held` containers wait for `release`,
    and which counts the calls at work at once and the order of the creates."""

    def __init__(self, node: str) -> None:
        super().__init__(node, cpu_cores=8)
        self.held: set[str] = set()
        self.release = asyncio.Event()
        self.working = 0
        self.most = 0
        self.created: list[str] = []

    async def _call(self) -> None:
        self.working += 1
        self.most = max(self.most, self.working)
        await asyncio.sleep(0)

    async def create(self, spec: ContainerSpec, labels: Mapping[str, str], node_cores: Sequence[str]) -> str:
        await self._call()
        try:
            self.created.append(spec.container_id)
            return await super().create(spec, labels, node_cores)
        finally:
            self.working -= 1

    async def start(self, container_id: str) -> None:
        await self._call()
        try:
            if container_id in self.held:
                await self.release.wait()
            await super().start(container_id)
        finally:
            self.working -= 1


def batch_of(count: int) -> NodeCommands:
    commands = []
    for index in range(count):
        cid = f"c{index}"
        spec = ContainerSpec(
            container_id=cid,
            deploy_id="d1",
            workload=Workload(name="w", image="sim"),
            allocation=Allocation(memory=16 * MiB),
        )
        commands.append(NodeCommand(command_id=f"k{index}", node=NODE_NAME, kind="create", container_id=cid, spec=spec))
    return NodeCommands(batch_id="b1", node=NODE_NAME, commands=commands)


def message(batch: NodeCommands) -> NodeCommandMessage:
    return NodeCommandMessage.model_construct(root=batch)  # as the consumer decodes it from the wire


def delivery(deliveries: int = 1) -> Delivery:
    return fake_delivery(
        f"eru.node.{NODE_NAME}.cmd.batch", stream=NODE, consumer=f"node-agent-{NODE_NAME}", deliveries=deliveries
    )


async def started_agent(runtime: SimRuntime, js: FakeJetStream, bound: int) -> NodeAgent:
    config = AgentConfig(node=NODE_NAME, engine_concurrency=bound)
    agent = NodeAgent(config, runtime, js, MemoryStateStore(), grouped=True)  # type: ignore[arg-type]
    await agent.start()
    js.published.clear()
    return agent


async def test_results_are_published_while_a_slow_start_holds_the_batch_and_the_engine_bound_holds() -> None:
    js, runtime = FakeJetStream(), GatedSim(NODE_NAME)
    agent = await started_agent(runtime, js, bound=2)
    batch = batch_of(7)
    runtime.held = {"c2"}
    envelope = new_envelope("eru.node.cmd.batch", "test")
    handling = asyncio.create_task(agent.handle(message(batch), envelope, delivery()))
    # c2 holds one slot; every other container starts through the other one and is reported meanwhile
    others = {f"c{i}" for i in range(7)} - {"c2"}
    await js.wait_until(lambda: others <= set(js.reported()))
    assert "c2" not in js.reported()
    assert not handling.done()  # the delivery is not acked while a command of it still runs
    assert runtime.created == [f"c{i}" for i in range(7)]  # in the order of the batch
    runtime.release.set()
    await handling
    assert sorted(js.reported()) == sorted([*others, "c2"])  # each exactly once
    assert runtime.most == 2
    assert len(js.answers()) >= 2
    whole = result_id(NODE_NAME, batch.batch_id)
    assert all(headers["Nats-Msg-Id"] != whole for _, _, headers in js.published)  # parts have ids of their own
    ids = [headers["Nats-Msg-Id"] for _, _, headers in js.published]
    assert len(set(ids)) == len(ids)

    # A redelivery: nothing runs again, nothing is reported again.
    created = list(runtime.created)
    await agent.handle(message(batch), envelope, delivery(deliveries=2))
    assert runtime.created == created
    assert sorted(js.reported()) == sorted([*others, "c2"])


async def test_a_result_the_bus_refused_is_reported_by_the_redelivery_and_only_it() -> None:
    js, runtime = FakeJetStream(), GatedSim(NODE_NAME)
    agent = await started_agent(runtime, js, bound=1)
    batch = batch_of(3)
    runtime.held = {"c1"}
    js.refuse = "c1"
    envelope = new_envelope("eru.node.cmd.batch", "test")
    handling = asyncio.create_task(agent.handle(message(batch), envelope, delivery()))
    await js.wait_until(lambda: "c0" in js.reported())
    runtime.release.set()
    with pytest.raises(ConnectionError):
        await handling  # c1's answer was refused: the delivery is retried once every command settled
    assert js.reported() == ["c0"]
    await agent.handle(message(batch), envelope, delivery(deliveries=2))
    assert sorted(js.reported()) == ["c0", "c1", "c2"]
    assert runtime.created == ["c0", "c1", "c2"]


async def test_on_the_sim_runtime_a_batch_is_still_answered_by_one_message() -> None:
    js, runtime = FakeJetStream(), SimRuntime(NODE_NAME, cpu_cores=8)
    agent = await started_agent(runtime, js, bound=2)
    batch = batch_of(20)
    await agent.handle(message(batch), new_envelope("eru.node.cmd.batch", "test"), delivery())
    assert [len(answer.events) for answer in js.answers()] == [20]
    assert js.published[0][2]["Nats-Msg-Id"] == result_id(NODE_NAME, batch.batch_id)
