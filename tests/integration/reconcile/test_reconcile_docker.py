"""Reconciliation on a real Docker engine: a container removed behind eru's back with `docker rm -f` is lost and
released within one inventory period; resources changed with `docker update` are set back. Only this test's node
and containers are touched (the engine is shared)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from reconcile_helpers import Stack, agent_process, poll

from eru.nodeagent.engine import engine_name
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
