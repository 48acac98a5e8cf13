"""The Docker node agent killed and restarted (when an engine answers): a node agent of its own, with a node name
unique to the run, serving the local engine; while it is down one of its containers is removed behind eru's back.
Only this run's containers (label `eru.node` = its node) are ever touched, and all of them are removed at the end."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Any

import asyncpg
from bench.faults.checks import ledger_ghosts
from bench.faults.stack import FaultStack, eru
from bench.faults.traffic import Traffic, settle_outcomes

from eru.nodeagent.engine import engine_name
from eru.testing.docker_image import engine_problem, ensure_test_image, remove_containers

PERIOD = 2.0


def _start_agent(stack: FaultStack, node: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "ERU_BUS__URL": stack.admin_url,
        "ERU_STATE_DIR": str(stack.state_dir / "docker-agent"),
        "ERU_NODE_AGENT__RUNTIME": "docker",
        "ERU_NODE_AGENT__NODE": node,
        "ERU_NODE_AGENT__POD": node,
        "ERU_INVENTORY_SECONDS": str(PERIOD),
        "ERU_LOG_FORMAT": "json",
    }
    log = (stack.state_dir / "logs" / f"node-agent-{node}.log").open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "eru_node_agent"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


async def _states(dsn: str, node: str) -> dict[str, str]:
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        return {r["id"]: r["state"] for r in await conn.fetch("SELECT id, state FROM containers WHERE node = $1", node)}
    finally:
        await conn.close()


async def docker_agent_restart(stack: FaultStack, opts: Any) -> dict[str, Any]:
    """Deploy on the Docker node, kill -9 its agent, `docker rm -f` one container, start the agent again: the
    ledger must release the removed one and hold nothing its node does not run."""
    problem = await engine_problem()
    if problem is not None:
        return {"skipped": f"no Docker engine: {problem}"}
    image = await ensure_test_image()
    node = f"faults-{uuid.uuid4().hex[:8]}"
    agent = _start_agent(stack, node)
    try:
        deadline = time.monotonic() + 60
        while node not in (await _node_names(stack.dsn)):
            assert time.monotonic() < deadline, "the docker node agent did not register"
            await asyncio.sleep(0.5)
        traffic = await Traffic.open(stack.nats_url)
        for _ in range(4):
            await traffic.send(pod=node, image=image, command=["sleep", "600"], memory="16MiB")  # Docker: ≥ 6 MB
        counts = await settle_outcomes(traffic, stack.dsn, opts.settle_seconds)
        await traffic.close()
        running = sorted(cid for cid, state in (await _states(stack.dsn, node)).items() if state == "running")
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait(10)
        victim = running[0] if running else None
        if victim is not None:
            await asyncio.to_thread(subprocess.run, ["docker", "rm", "-f", engine_name(victim)], capture_output=True)
        restarted_at = time.monotonic()
        agent = _start_agent(stack, node)
        released = None
        while time.monotonic() < restarted_at + 10 * PERIOD:
            states = await _states(stack.dsn, node)
            if victim is None or states.get(victim) in ("lost", "removed"):
                released = round(time.monotonic() - restarted_at, 2)
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(2 * PERIOD)
        return {
            **counts,
            "containers_before": len(running),
            "removed_behind_erus_back": victim,
            "released_after_restart_seconds": released,
            "victim_state": (await _states(stack.dsn, node)).get(victim or "", ""),
            "ledger_ghosts": await ledger_ghosts(eru, str(stack.state_dir)),
        }
    finally:
        if agent.poll() is None:
            agent.terminate()
            try:
                agent.wait(15)
            except subprocess.TimeoutExpired:
                agent.kill()
        await remove_containers("eru.node", node)


async def _node_names(dsn: str) -> set[str]:
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        return {r["name"] for r in await conn.fetch("SELECT name FROM nodes")}
    finally:
        await conn.close()
