"""A node's batch of commands (`eru.node.<node>.cmd.batch`) on the sim runtime over a real nats-server: every command
runs once, one `ContainerEvents` answers them all in order (sim commands finish at once), a repeat has no second
effect and reports nothing again, a bad command fails alone, and a batch that is not this node's is dead-lettered
whole."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_helpers import Collector, create, running_agent, workload

from eru.bus import new_envelope, new_id, publish
from eru.bus.streams import NODE
from eru.bus.subjects import node_command
from eru.domain.messages import ContainerEvents, NodeCommand, NodeCommands
from eru.domain.resources import Allocation
from eru_node_agent.config import result_id
from eru_node_agent.runtime.sim import SimRuntime

MiB = 1024**2


async def send_batch(js: Any, batch: NodeCommands, subject_node: str | None = None) -> int:
    """Publish `batch` as a new message; its stream sequence."""
    envelope = new_envelope("eru.node.cmd.batch", "test", message_id=new_id())  # a new message each time
    ack = await publish(js, node_command(subject_node or batch.node, "batch"), batch, envelope)
    return int(ack.seq)


async def wait_acked(js: Any, node: str, seq: int) -> None:
    """Wait until the node's consumer has acked every message up to stream sequence `seq`."""
    for _ in range(600):
        info = await js.consumer_info(NODE, f"node-agent-{node}")
        if info.ack_floor.stream_seq >= seq and info.num_ack_pending == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the message at {seq} was not acked: {info}")


async def test_a_batch_runs_each_command_once_and_answers_in_one_message(js: Any, nc: Any) -> None:
    node = "batch-a"
    runtime = SimRuntime(node, cpu_cores=8)
    reports = await Collector(ContainerEvents).start(nc, f"eru.container.{node}.batch")
    first = create(node, workload("sim"), Allocation(cpu_limit=1, memory=64 * MiB))
    second = create(node, workload("sim"), Allocation(cpu_limit=1, memory=64 * MiB))
    broken = NodeCommand(command_id=new_id(), node=node, kind="create", container_id="cnospec")  # no spec
    batch = NodeCommands(batch_id=new_id(), node=node, commands=[first, broken, second])
    async with running_agent(js, runtime, node):
        await send_batch(js, batch)
        report = await reports.wait_for(lambda r: True)
        assert [(e.command_id, e.kind) for e in report.events] == [
            (first.command_id, "started"),
            (broken.command_id, "failed"),
            (second.command_id, "started"),
        ]
        assert "spec" in report.events[1].reason
        assert first.spec is not None
        assert report.events[0].allocation == first.spec.allocation
        assert sorted(runtime.containers) == sorted([first.container_id, second.container_id])
        (_, _, headers) = reports.items[0]
        assert headers["Nats-Msg-Id"] == result_id(node, batch.batch_id)

        # The same batch again (an outbox repeat or a redelivery): done once its message is acked, nothing created
        # twice and nothing reported twice (every result was published already).
        runtime.containers.clear()
        await wait_acked(js, node, await send_batch(js, batch))
        assert len(reports.items) == 1
        assert runtime.containers == {}


async def test_a_batch_with_another_nodes_command_is_dead_lettered_and_runs_nothing(js: Any, nc: Any) -> None:
    node = "batch-b"
    runtime = SimRuntime(node, cpu_cores=8)
    dead: list[Any] = []

    async def on_dead_letter(msg: Any) -> None:
        dead.append(msg)

    await nc.subscribe(f"eru.dlq.eru.node.{node}.cmd.>", cb=on_dead_letter)
    reports = await Collector(ContainerEvents).start(nc, f"eru.container.{node}.batch")
    mine = create(node, workload("sim"), Allocation(memory=16 * MiB))
    theirs = create(f"{node}x", workload("sim"), Allocation(memory=16 * MiB))
    async with running_agent(js, runtime, node):
        await send_batch(js, NodeCommands(batch_id=new_id(), node=node, commands=[mine, theirs]))
        # a single command sent on the batch subject is refused too
        await publish(js, node_command(node, "batch"), mine, new_envelope("eru.node.cmd.batch", "test"))
        for _ in range(100):
            if len(dead) >= 2:
                break
            await asyncio.sleep(0.05)
        reasons = sorted(msg.headers.get("Eru-Dlq-Reason", "") for msg in dead)
        assert len(reasons) == 2, reasons
        assert "commands[1] is for node" in reasons[1] or "commands[1] is for node" in reasons[0], reasons
        assert any("subject says 'batch'" in reason for reason in reasons), reasons
        assert runtime.containers == {}
        # the agent goes on serving batches
        ok = create(node, workload("sim"), Allocation(memory=16 * MiB))
        await send_batch(js, NodeCommands(batch_id=new_id(), node=node, commands=[ok]))
        assert [e.kind for e in (await reports.wait_for(lambda r: True)).events] == ["started"]
