"""Reconciliation with real sim node agents, a real allocator, nats-server and PostgreSQL (docs/operations.md)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import pytest
from reconcile_helpers import Stack, agent_process, poll

from eru.bus.codec import decode
from eru.domain import ContainerEvent
from eru.domain.messages import ContainerSpec, Workload
from eru.domain.resources import Allocation
from eru.nodeagent.engine import container_labels
from eru_node_agent.runtime.sim import SimRuntime

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
async def stack(nats_url: str, postgres_dsn: str) -> Any:
    running = Stack(nats_url, postgres_dsn)
    await running.start()
    yield running
    await running.close()


async def test_a_sim_agent_killed_and_restarted_leaves_no_container_running_in_the_ledger(stack: Stack) -> None:
    """The issue's break: the restarted sim agent runs nothing, yet the ledger kept every container running and
    charged. Now the first inventory of the new agent marks them lost and gives their resources back."""
    lost_events: list[ContainerEvent] = []

    async def on_lost(msg: Any) -> None:
        lost_events.append(decode(msg.data, ContainerEvent))

    await stack.nc.subscribe("eru.container.rc-sim.lost", cb=on_lost)
    async with agent_process(stack.js, SimRuntime("rc-sim"), "rc-sim", "rcpod"):
        await stack.registered("rc-sim")
        outcome = await stack.deploy("rcpod", 6)
        assert outcome.kind == "completed", outcome
        assert list((await stack.states("rc-sim")).values()) == ["running"] * 6
        assert await stack.used_memory("rc-sim") == 6 * 16 * 2**20
    # killed; the new process has a fresh simulated engine (nothing survives a sim agent's death)
    async with agent_process(stack.js, SimRuntime("rc-sim"), "rc-sim", "rcpod") as agent:
        states = await poll(lambda: stack.states("rc-sim"), lambda s: set(s.values()) == {"lost"})
        assert len(states) == 6
        assert await stack.used_memory("rc-sim") == 0
        used_cpu = await stack.pool.fetchval("SELECT used_cpu_map FROM nodes WHERE name = 'rc-sim'")
        assert all(v == 0 for v in json.loads(used_cpu).values())
        await poll(lambda: _now(len(lost_events)), lambda n: n == 6)
        assert {e.container_id for e in lost_events} == set(states)
        assert all(e.reason.startswith("reconcile: ") for e in lost_events)
        # the node takes new work again, and that work is not lost by later inventories
        again = await stack.deploy("rcpod", 2)
        assert again.kind == "completed"
        inventories = agent.inventories
        await poll(lambda: _now(agent.inventories), lambda n: n >= inventories + 2)
        assert sorted((await stack.states("rc-sim")).values()) == ["lost"] * 6 + ["running"] * 2


async def test_unknown_containers_are_removed_and_drifted_resources_set_again(stack: Stack) -> None:
    runtime = SimRuntime("rc-drift")
    async with agent_process(stack.js, runtime, "rc-drift", "rcpod"):
        await stack.registered("rc-drift")
        bound = {"cpu_request": 1.5, "cpu_bind": True, "memory_request": "64MiB"}
        outcome = await stack.deploy("rcpod", 1, resources=bound)
        (cid,) = outcome.started
        planned = runtime.containers[cid].allocation
        # behind eru's back: the container's cpuset is changed, and a container eru labelled for this node appears.
        # Through the engine's own update (as `docker update` would), not by assigning the field: the sim engine
        # keeps a container's applied resources until they change, so an inventory taken between the start and a
        # bare assignment kept reporting the planned cpuset and the drift was never seen (run a1, under load).
        drifted = planned.model_copy(update={"cpu_map": {"0": 100}})
        await runtime.update(cid, drifted, runtime.containers[cid].node_cores)
        stranger = ContainerSpec(
            container_id="cstranger01",
            deploy_id="d-none",
            workload=Workload(name="x", image="busybox"),
            allocation=Allocation(memory=2**20),
        )
        await runtime.create(stranger, container_labels(stranger, "rc-drift"), [str(i) for i in range(16)])
        await runtime.start("cstranger01")
        await poll(lambda: _now("cstranger01" in runtime.containers), lambda present: not present)
        await poll(lambda: _now(runtime.containers[cid].allocation), lambda a: a == planned)
        assert (await stack.states("rc-drift"))[cid] == "running"


async def test_eru_reconcile_dry_run_shows_the_diff_and_changes_nothing(nats_url: str, postgres_dsn: str) -> None:
    stack = Stack(nats_url, postgres_dsn)
    await stack.start(enabled=False)  # only the operator verb acts
    try:
        async with agent_process(stack.js, SimRuntime("rc-dry"), "rc-dry", "rcpod"):
            await stack.registered("rc-dry")
            outcome = await stack.deploy("rcpod", 2)
        restarted_at = time.time()
        # a new agent process with an empty engine; only the operator's verb reconciles in this stack
        async with agent_process(stack.js, SimRuntime("rc-dry"), "rc-dry", "rcpod"):
            await poll(
                lambda: stack.pool.fetchval("SELECT taken_at FROM node_inventories WHERE node = 'rc-dry'"),
                lambda taken_at: taken_at is not None and taken_at > restarted_at + 1.0,  # past the grace
            )
            # as an operator types it: a table on a terminal, JSON with --json
            table = await cli("reconcile", "--dry-run", "--node", "rc-dry", "--nats", stack.nats_url)
            assert "reconcile (dry run: nothing changed)" in table
            assert table.count("mark_lost") == 2
            assert "1 nodes compared, 2 differences, 2 would be acted on" in table
            shown = json.loads(await cli("reconcile", "--dry-run", "--json", "--nats", stack.nats_url))
            assert sorted(f["container_id"] for f in shown["findings"]) == sorted(outcome.started)
            dry = await stack.reconcile(node="rc-dry", dry_run=True)
            lost = sorted(outcome.started)
            assert [(r["kind"], r["container_id"], r["action"]) for r in dry.rows] == [
                ("lost", cid, "mark_lost") for cid in lost
            ]
            assert dry.message == "1 nodes compared, 2 differences, 2 would be acted on"
            assert set((await stack.states("rc-dry")).values()) == {"running"}
            done = await stack.reconcile(node="rc-dry", dry_run=False)
            assert [r["container_id"] for r in done.rows] == lost
            assert set((await stack.states("rc-dry")).values()) == {"lost"}
            assert await stack.used_memory("rc-dry") == 0
            again = await stack.reconcile(node="rc-dry", dry_run=False)  # idempotent: nothing left to do
            assert again.rows == []
    finally:
        await stack.close()


async def cli(*args: str) -> str:
    """`eru …` in its own process, as a person runs it (exit code 0 expected)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "eru.cli", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode()


async def _now(value: Any) -> Any:
    return value
