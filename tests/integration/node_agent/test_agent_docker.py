"""The node agent's bus behaviour on a real engine: rebuild after a restart, only its own node's commands, dead
letters for malformed commands, idempotent commands, registration and heartbeats."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiodocker
import pytest
from agent_helpers import Collector, create, running_agent, send, workload

from eru.bus import new_id
from eru.bus.envelope import new_envelope
from eru.bus.publish import message_headers
from eru.bus.streams import EVENTS
from eru.domain.messages import ContainerEvent, ContainerSpec, Heartbeat, NodeCommand, NodeRegistration
from eru.domain.resources import Allocation
from eru.nodeagent.engine import container_labels, engine_name
from eru.testing.docker_image import remove_containers
from eru_node_agent.runtime.docker import DockerRuntime
from eru_node_agent.state import FileStateStore

pytestmark = [pytest.mark.docker]
MiB = 1024**2


async def test_after_a_restart_the_agent_rebuilds_from_labels_and_reports_present_vanished_foreign(
    js: Any, nc: Any, busybox_image: str, docker_node: str, docker_engine: str | None, tmp_path: Path
) -> None:
    node = docker_node
    store = FileStateStore(tmp_path / "state" / f"{node}.json")
    events = await Collector(ContainerEvent).start(nc, f"eru.container.{node}.*")
    keep = create(node, workload(busybox_image, "sleep", "600"), Allocation(cpu_map={"0": 40}, memory=16 * MiB))
    lose = create(node, workload(busybox_image, "sleep", "600"), Allocation(cpu_map={"1": 40}, memory=16 * MiB))
    async with running_agent(js, DockerRuntime(), node, store=store):
        for command in (keep, lose):
            await send(js, command)
            assert (await events.wait_for(lambda e, c=command: e.command_id == c.command_id)).kind == "started"
        # Realloc before the restart: labels keep the creation allocation, the state file the current one.
        update = NodeCommand(
            command_id=new_id(),
            node=node,
            kind="update",
            container_id=keep.container_id,
            allocation=Allocation(cpu_map={"0": 60}, memory=24 * MiB),
        )
        await send(js, update)
        assert (await events.wait_for(lambda e: e.command_id == update.command_id)).kind == "updated"

    # While the agent is down: one container vanishes, one of another node's appears.
    docker = aiodocker.Docker(url=docker_engine)
    other_node = f"{node}x"
    try:
        await docker._query_json(f"containers/{engine_name(lose.container_id)}", "DELETE", params={"force": "true"})
        stranger = ContainerSpec(
            container_id=f"s{new_id().replace('-', '')[-12:]}",
            deploy_id="d9",
            workload=workload(busybox_image, "sleep", "600"),
            allocation=Allocation(memory=16 * MiB),
        )
        outsider = DockerRuntime(url=docker_engine)
        try:
            await outsider.create(stranger, container_labels(stranger, other_node), ["0", "1"])
            await outsider.start(stranger.container_id)
        finally:
            await outsider.close()
        events.items.clear()
        async with running_agent(js, DockerRuntime(), node, store=store) as agent:
            found = await events.wait_for(lambda e: e.container_id == keep.container_id and e.kind == "found")
            assert found.allocation == update.allocation  # the current allocation, not the label's
            assert found.deploy_id == "d1"
            vanished = await events.wait_for(lambda e: e.container_id == lose.container_id)
            assert vanished.kind == "removed"
            assert "vanished" in vanished.reason
            foreign = await events.wait_for(lambda e: e.container_id == stranger.container_id)
            assert foreign.kind == "foreign"
            assert other_node in foreign.reason
            assert set(agent.state.containers) == {keep.container_id}
            # The rebuilt agent serves the container it found.
            stop = NodeCommand(command_id=new_id(), node=node, kind="remove", container_id=keep.container_id)
            await send(js, stop)
            assert (await events.wait_for(lambda e: e.command_id == stop.command_id)).kind == "removed"
        inspect_after = await docker._query_json(f"containers/{engine_name(stranger.container_id)}/json")
        assert inspect_after["State"]["Running"]  # a foreign container is never touched
    finally:
        await docker.close()
        await remove_containers("eru.node", other_node, url=docker_engine)


async def test_only_own_commands_run_malformed_ones_are_dead_lettered_repeats_have_one_effect(
    js: Any, nc: Any, busybox_image: str, docker_node: str, docker_engine: str | None
) -> None:
    node = docker_node
    events = await Collector(ContainerEvent).start(nc, "eru.container.*.*")
    registrations = await Collector(NodeRegistration).start(nc, f"eru.node.{node}.registered")
    heartbeats = await Collector(Heartbeat).start(nc, f"eru.node.{node}.heartbeat")
    dead: list[Any] = []

    async def on_dead_letter(msg: Any) -> None:
        dead.append(msg)

    await nc.subscribe(f"eru.dlq.eru.node.{node}.cmd.>", cb=on_dead_letter)
    other = f"{node}o"
    async with running_agent(js, DockerRuntime(), node):
        registration = await registrations.wait_for(lambda r: True)
        assert registration.runtime == "docker"
        assert len(registration.cpu_map) >= 1
        assert all(pieces == 100 for pieces in registration.cpu_map.values())
        assert registration.memory > 0

        # For another node, on its own subject: this agent never sees it.
        elsewhere = create(other, workload(busybox_image, "sleep", "600"), Allocation(memory=16 * MiB))
        await send(js, elsewhere)
        # For another node but published on this node's subject: refused and dead-lettered.
        misrouted = create(other, workload(busybox_image, "sleep", "600"), Allocation(memory=16 * MiB))
        await send(js, misrouted, subject_node=node)
        # Not even msgpack.
        envelope = new_envelope("eru.node.cmd.create", "test")
        await js.publish(f"eru.node.{node}.cmd.create", b"\xc1garbage", headers=message_headers(envelope))
        # A valid command sent twice (a redelivery or an outbox repeat): one container, one stored event.
        twice = create(node, workload(busybox_image, "sleep", "600"), Allocation(memory=16 * MiB))
        await send(js, twice)
        await send(js, twice)
        started = await events.wait_for(lambda e: e.command_id == twice.command_id)
        assert started.kind == "started"
        for _ in range(100):
            if len(dead) >= 2:
                break
            await asyncio.sleep(0.1)
        assert len(dead) == 2, dead
        reasons = sorted(msg.headers.get("Eru-Dlq-Reason", "") for msg in dead)
        assert any("delivered to the agent of node" in reason for reason in reasons), reasons
        assert any("rejected" in reason for reason in reasons), reasons
        # The agent still serves after the dead letters.
        after = create(node, workload(busybox_image, "sleep", "600"), Allocation(memory=16 * MiB))
        await send(js, after)
        assert (await events.wait_for(lambda e: e.command_id == after.command_id)).kind == "started"
        beat = await heartbeats.wait_for(lambda h: twice.container_id in h.containers)
        assert after.container_id in beat.containers or twice.container_id in beat.containers

    docker = aiodocker.Docker(url=docker_engine)
    try:
        mine = await docker._query_json(
            "containers/json", params={"all": "true", "filters": f'{{"label": ["eru.node={node}"]}}'}
        )
        theirs = await docker._query_json(
            "containers/json", params={"all": "true", "filters": f'{{"label": ["eru.node={other}"]}}'}
        )
    finally:
        await docker.close()
    names = sorted(row["Names"][0].lstrip("/") for row in mine)
    assert names == sorted([engine_name(twice.container_id), engine_name(after.container_id)])
    assert theirs == []
    assert not [e for e in events.models() if e.container_id in (elsewhere.container_id, misrouted.container_id)]
    # Both deliveries of `twice` published the same event id: the stream stored it once.
    stored = await _stored_events(js, f"eru.container.{node}.started")
    assert sum(1 for event in stored if event.command_id == twice.command_id) == 1


async def _stored_events(js: Any, subject: str) -> list[ContainerEvent]:
    from eru.bus import decode

    subscription = await js.pull_subscribe(subject, stream=EVENTS)
    found: list[ContainerEvent] = []
    try:
        while True:
            try:
                batch = await subscription.fetch(50, timeout=1)
            except TimeoutError:
                break
            for msg in batch:
                found.append(decode(msg.data, ContainerEvent, (msg.headers or {}).get("Content-Type")))
                await msg.ack()
    finally:
        await subscription.unsubscribe()
    return found


async def test_heartbeats_report_containers_that_exit_or_vanish_behind_the_agents_back(
    js: Any, nc: Any, busybox_image: str, docker_node: str, docker_engine: str | None
) -> None:
    node = docker_node
    events = await Collector(ContainerEvent).start(nc, f"eru.container.{node}.*")
    heartbeats = await Collector(Heartbeat).start(nc, f"eru.node.{node}.heartbeat")
    short = create(node, workload(busybox_image, "sh", "-c", "sleep 1; exit 4"), Allocation(memory=16 * MiB))
    doomed = create(node, workload(busybox_image, "sleep", "600"), Allocation(memory=16 * MiB))
    async with running_agent(js, DockerRuntime(), node, heartbeat_interval_seconds=1.0):
        for command in (short, doomed):
            await send(js, command)
            assert (await events.wait_for(lambda e, c=command: e.command_id == c.command_id)).kind == "started"
        docker = aiodocker.Docker(url=docker_engine)
        try:
            await docker._query_json(
                f"containers/{engine_name(doomed.container_id)}", "DELETE", params={"force": "true"}
            )
        finally:
            await docker.close()
        exited = await events.wait_for(lambda e: e.container_id == short.container_id and e.command_id is None)
        assert (exited.kind, exited.reason) == ("stopped", "exited with code 4")
        vanished = await events.wait_for(lambda e: e.container_id == doomed.container_id and e.command_id is None)
        assert vanished.kind == "removed"
        assert vanished.allocation == Allocation(memory=16 * MiB)
        seen = len(heartbeats.items)
        await heartbeats.wait_for(lambda _: len(heartbeats.items) > seen)
        beat = heartbeats.models()[seen]
        assert beat.containers == [short.container_id]  # exited, but still there until removed
