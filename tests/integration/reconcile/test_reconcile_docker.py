"""Reconciliation on a real Docker engine: a container removed behind eru's back with `docker rm -f` is lost and
released within one inventory period; resources changed with `docker update` are set back. Only this test's node
and containers are touched (the engine is shared)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from typing import Any

import pytest
from reconcile_helpers import Stack, agent_process, poll

from eru.bus.codec import decode
from eru.bus.subjects import node_inventory
from eru.domain.inventory import NodeInventory
from eru.nodeagent.engine import L_CONTAINER, L_NODE, engine_name, stray_id
from eru_node_agent.runtime.docker import DockerRuntime

pytestmark = [pytest.mark.docker, pytest.mark.timeout(120)]
PERIOD = 2.0


async def docker(*args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        "docker", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode().strip()


async def test_a_container_removed_behind_erus_back_is_lost_and_released_within_one_period(
    nats_url: str, postgres_dsn: str, busybox_image: str, docker_node: str
) -> None:
    stack = Stack(nats_url, postgres_dsn)
    await stack.start()
    node = docker_node
    try:
        # the agent's own vanish check (heartbeats) is pushed out of the test: only the ledger reconciler may act
        async with agent_process(
            stack.js,
            DockerRuntime(),
            node,
            "rcdocker",
            heartbeat_interval_seconds=1e6,
            inventory_interval_seconds=PERIOD,
        ):
            await stack.registered(node)
            outcome = await stack.deploy("rcdocker", 2, image=busybox_image, command=["sleep", "600"])
            assert outcome.kind == "completed", outcome
            victim, keeper = sorted(outcome.started)
            before = await stack.used_memory(node)
            await asyncio.sleep(1.0)  # past the grace (0.5 s) since the ledger saw them running
            await docker("rm", "-f", engine_name(victim))
            removed_at = time.monotonic()
            states = await poll(lambda: stack.states(node), lambda s: s[victim] == "lost", within=3 * PERIOD)
            assert time.monotonic() - removed_at <= PERIOD + 1.0  # one period, plus the time to apply it
            assert states[keeper] == "running"
            assert await stack.used_memory(node) == before - 16 * 2**20

            # behind eru's back again: the keeper's CPU shares changed; the next inventory sets the ledger's again
            planned = await docker("inspect", "-f", "{{.HostConfig.CpuShares}}", engine_name(keeper))
            await docker("update", "--cpu-shares", "3", engine_name(keeper))
            await poll(
                lambda: docker("inspect", "-f", "{{.HostConfig.CpuShares}}", engine_name(keeper)),
                lambda shares: shares == planned,
                within=4 * PERIOD,
            )
            row = await stack.pool.fetchval("SELECT allocation FROM containers WHERE id = $1", keeper)
            assert json.loads(row)["memory"] == 16 * 2**20
            assert (await stack.states(node))[keeper] == "running"
    finally:
        await stack.close()


async def test_a_container_with_erus_labels_but_not_erus_name_is_unknown_and_removed_within_one_period(
    nats_url: str, postgres_dsn: str, busybox_image: str, docker_node: str
) -> None:
    """Started by hand with eru's labels for this node and a name of its own: one copying a running container's
    labels (same eru id), one with an eru id the ledger never held. The inventory used to look each up by eru's
    engine name (`eru-<id>`), found nothing and left it out: never `unknown`, never removed. Now each is listed as a
    stray (`stray-<engine id>`), found `unknown`, and removed by the default rule (ERU_RECONCILE__UNKNOWN=remove);
    the container whose labels were copied is untouched."""
    stack = Stack(nats_url, postgres_dsn)
    await stack.start()
    node = docker_node
    inventories: list[NodeInventory] = []

    async def on_inventory(msg: Any) -> None:
        inventories.append(decode(msg.data, NodeInventory))

    await stack.nc.subscribe(node_inventory(node), cb=on_inventory)
    strays: list[str] = []
    try:
        async with agent_process(
            stack.js,
            DockerRuntime(node=node),
            node,
            "rcstray",
            heartbeat_interval_seconds=1e6,
            inventory_interval_seconds=PERIOD,
        ):
            await stack.registered(node)
            outcome = await stack.deploy("rcstray", 1, image=busybox_image, command=["sleep", "600"])
            assert outcome.kind == "completed", outcome
            (real,) = outcome.started
            labels = json.loads(await docker("inspect", "-f", "{{json .Config.Labels}}", engine_name(real)))
            assert labels[L_NODE] == node
            unheld = {**labels, L_CONTAINER: f"never{uuid.uuid4().hex[:10]}"}
            for copied in (labels, unheld):
                name = f"by-hand-{uuid.uuid4().hex[:10]}"
                flags = [arg for key, value in copied.items() for arg in ("--label", f"{key}={value}")]
                strays.append(await docker("run", "-d", "--name", name, *flags, busybox_image, "sleep", "600"))
            wanted = {stray_id(engine_id) for engine_id in strays}

            def reported(found: list[NodeInventory]) -> set[str]:
                return {e.container_id for i in found for e in i.containers if e.managed and e.node == node}

            # reported in an inventory (as this node's own, which the ledger does not hold), then removed
            await poll(lambda: _now(list(inventories)), lambda found: wanted <= reported(found), within=3 * PERIOD)
            for engine_id in strays:
                await poll(
                    lambda engine_id=engine_id: docker("ps", "-aq", "--no-trunc", "--filter", f"id={engine_id}"),
                    lambda out: out == "",
                    within=3 * PERIOD,
                )
            assert (await stack.states(node))[real] == "running"
            assert await docker("inspect", "-f", "{{.State.Running}}", engine_name(real)) == "true"
    finally:
        for engine_id in strays:
            with contextlib.suppress(AssertionError):
                await docker("rm", "-f", engine_id)
        await stack.close()


async def _now(value: Any) -> Any:
    return value
