"""The deploy pipeline as processes: kill -9 of an allocator replica loses nothing and allocates nothing twice; the
CLI deploys onto the real sim node agent."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from pipeline_processes import TERMINAL, Processes, usage_problems

from eru.bus import new_envelope, publish
from eru.bus.codec import decode
from eru.bus.subjects import DEPLOY_REQUEST
from eru.domain import DeployEvent, DeployRequest
from eru.store import create_pool
from eru.testing.pytest_docker import busybox_image, docker_engine, docker_node
from eru.testing.pytest_postgres import postgres_dsn, postgres_server, postgres_template

__all__ = ["busybox_image", "docker_engine", "docker_node", "postgres_dsn", "postgres_server", "postgres_template"]
ERU = str(Path(sys.executable).with_name("eru"))


@pytest.fixture
def processes(nats_url: str, postgres_dsn: str, tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(nats_url, postgres_dsn, tmp_path / "logs")
    try:
        yield procs
    finally:
        procs.stop_all()


@pytest_asyncio.fixture
async def pool(postgres_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(postgres_dsn, min_size=1, max_size=4)
    try:
        yield pool
    finally:
        await pool.close()


async def wait_for(probe: Any, expected: Any, within: float, processes: Processes) -> None:
    try:
        async with asyncio.timeout(within):
            while await probe() != expected:  # noqa: ASYNC110 - polling another process's database writes
                await asyncio.sleep(0.2)
    except TimeoutError:
        pytest.fail(f"still {await probe()!r}, expected {expected!r}; logs:\n{processes.logs()}")


async def stored_deploy_events(js: Any) -> list[tuple[str, DeployEvent]]:  # (ce-source, event)
    """Every deploy event stored in ERU_DEPLOY (a duplicate publish is stored once: Nats-Msg-Id)."""
    subscription = await js.subscribe("eru.deploy.*.*", ordered_consumer=True)
    events = []
    try:
        while True:
            msg = await subscription.next_msg(timeout=10)
            events.append((msg.headers["ce-source"], decode(msg.data, DeployEvent)))
            if msg.metadata.num_pending == 0:
                return events
    finally:
        await subscription.unsubscribe()


@pytest.mark.slow
async def test_kill_9_of_an_allocator_replica_loses_nothing(processes: Processes, pool: asyncpg.Pool, js: Any) -> None:
    processes.start("distributor", "eru_distributor")
    for index in range(3):
        processes.start(f"allocator-{index}", "eru_allocator")
    processes.sim_agent(nodes=4)
    await wait_for(lambda: pool.fetchval("SELECT count(*) FROM nodes"), 4, 60, processes)

    total = 90
    requests = [
        DeployRequest.model_validate(
            {
                "request_id": f"stream-{i}",
                "pod": "p1",
                "count": 1 + i % 3,
                "workload": {
                    "name": f"w{i % 5}",
                    "image": "busybox",
                    "resources": {"cpu_bind": i % 2 == 0, "cpu_request": 0.1, "memory_request": "64MiB"},
                },
            }
        )
        for i in range(total)
    ]
    planners: list[str] = []
    some_planned = asyncio.Event()

    async def on_planned(msg: Any) -> None:
        planners.append(msg.headers["ce-source"].removeprefix("allocator/"))
        some_planned.set()

    watch = await js._nc.subscribe("eru.deploy.*.planned", cb=on_planned)
    victim = ""
    for index, request in enumerate(requests):
        await publish(js, DEPLOY_REQUEST, request, new_envelope("eru.deploy.request", "test-client"))
        if index == 30:
            await asyncio.wait_for(some_planned.wait(), 30)
            victim = planners[-1]  # a replica that is working, in the middle of the stream, with requests in flight
            processes.kill9(victim)
        await asyncio.sleep(0.01)
    await watch.unsubscribe()
    for request in requests[:10]:  # client retries of requests already made
        await publish(js, DEPLOY_REQUEST, request, new_envelope("eru.deploy.request", "test-client"))

    finished = "SELECT count(*) FROM deploys WHERE status IN ('completed', 'partial', 'failed')"
    await wait_for(lambda: pool.fetchval(finished), total, 120, processes)
    assert await pool.fetchval("SELECT count(*) FROM deploys") == total
    assert await pool.fetchval("SELECT count(*) FROM deploys WHERE status = 'completed'") == total
    per_deploy = await pool.fetch(
        "SELECT d.request_id, count(c.id) AS n FROM deploys d LEFT JOIN containers c ON c.deploy_id = d.id "
        "GROUP BY d.request_id"
    )
    assert {row["request_id"]: row["n"] for row in per_deploy} == {r.request_id: r.count for r in requests}
    assert await usage_problems(pool) == []
    # every committed outbox row published: by its batch, or by a relay (a killed replica's held rows, once their
    # hold has passed: docs/store.md "Publishing after the commit")
    unpublished = "SELECT count(*) FROM outbox WHERE published_at IS NULL"
    await wait_for(lambda: pool.fetchval(unpublished), 0, 60, processes)
    stored = await stored_deploy_events(js)
    terminal = Counter(e.deploy_id for _, e in stored if e.kind in TERMINAL)
    assert len(terminal) == total
    assert set(terminal.values()) == {1}
    planned_by = Counter(source for source, e in stored if e.kind == "planned")
    assert planned_by[f"allocator/{victim}"] > 0  # the killed replica was working when it died
    assert sum(planned_by.values()) == total


def eru(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ERU, *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, "COLUMNS": "200"}
    )


async def test_cli_deploys_onto_the_sim_node_agent(processes: Processes, pool: asyncpg.Pool, nats_url: str) -> None:
    processes.start("distributor", "eru_distributor")
    processes.start("allocator", "eru_allocator")
    processes.sim_agent(nodes=2, cores=4)
    await wait_for(lambda: pool.fetchval("SELECT count(*) FROM nodes"), 2, 60, processes)

    deploy = await asyncio.to_thread(
        eru,
        "deploy",
        "--nats",
        nats_url,
        "--pod",
        "p1",
        "--image",
        "nginx:1",
        "--count",
        "3",
        "--cpu",
        "1.5",
        "--cpu-bind",
        "--memory",
        "512MiB",
        "--mode",
        "auto",
    )
    assert deploy.returncode == 0, deploy.stdout + deploy.stderr
    assert "completed" in deploy.stdout
    rows = await pool.fetch("SELECT node, state, allocation FROM containers")
    assert len(rows) == 3
    assert {r["state"] for r in rows} == {"running"}
    assert all(sum(json.loads(r["allocation"])["cpu_map"].values()) == 150 for r in rows)

    nodes = await asyncio.to_thread(eru, "node", "ls", "--nats", nats_url)
    assert nodes.returncode == 0, nodes.stderr
    assert "sim-001" in nodes.stdout
    assert "sim-002" in nodes.stdout
    assert "4.5/8" in nodes.stdout.replace(" ", "") or "3/4" in nodes.stdout

    too_big = await asyncio.to_thread(
        eru,
        "deploy",
        "--nats",
        nats_url,
        "--pod",
        "p1",
        "--image",
        "nginx:1",
        "--count",
        "1",
        "--cpu",
        "-1",
    )
    assert too_big.returncode == 2
    assert "--cpu" in too_big.stderr  # the option typed, not the model field (docs/cli.md "Limits")

    unknown = await asyncio.to_thread(
        eru,
        "deploy",
        "--nats",
        nats_url,
        "--pod",
        "nowhere",
        "--image",
        "nginx:1",
        "--count",
        "1",
    )
    assert unknown.returncode == 2
    assert "unknown pod" in unknown.stderr

    deploy_id = await pool.fetchval("SELECT id FROM deploys WHERE status = 'completed'")
    status = await asyncio.to_thread(eru, "deploy", "status", deploy_id, "--nats", nats_url)
    assert status.returncode == 0, status.stderr
    assert "completed" in status.stdout
    assert await usage_problems(pool) == []


@pytest.mark.docker
async def test_cli_deploys_onto_a_docker_node_with_the_planned_cpuset(
    processes: Processes, pool: asyncpg.Pool, nats_url: str, busybox_image: str, docker_node: str
) -> None:
    import aiodocker

    processes.start("distributor", "eru_distributor")
    processes.start("allocator", "eru_allocator")
    processes.start(
        "node-agent-docker",
        "eru_node_agent",
        ERU_NODE_AGENT__RUNTIME="docker",
        ERU_NODE_AGENT__NODE=docker_node,
        ERU_NODE_AGENT__POD="p1",
        ERU_NODE_AGENT__MEMORY=str(1024**3),
    )
    await wait_for(lambda: pool.fetchval("SELECT count(*) FROM nodes"), 1, 60, processes)

    deploy = await asyncio.to_thread(
        eru,
        "deploy",
        "--nats",
        nats_url,
        "--pod",
        "p1",
        "--image",
        busybox_image,
        "--command",
        "sleep 600",
        "--count",
        "1",
        "--cpu",
        "0.5",
        "--cpu-bind",
        "--memory",
        "32MiB",
    )
    assert deploy.returncode == 0, deploy.stdout + deploy.stderr + processes.logs()
    row = await pool.fetchrow("SELECT id, allocation FROM containers")
    allocation = json.loads(row["allocation"])
    assert sum(allocation["cpu_map"].values()) == 50
    docker = aiodocker.Docker()
    try:
        found = await docker.containers.list(all=True, filters=json.dumps({"label": [f"eru.node={docker_node}"]}))
        assert len(found) == 1
        info = await found[0].show()
        assert info["State"]["Running"]
        assert info["HostConfig"]["CpusetCpus"] == ",".join(sorted(allocation["cpu_map"]))
        assert info["HostConfig"]["Memory"] == 32 * 1024**2

        removed = await asyncio.to_thread(eru, "container", "rm", row["id"], "--nats", nats_url)
        assert removed.returncode == 0, removed.stderr
        await wait_for(
            lambda: pool.fetchval("SELECT state FROM containers WHERE id = $1", row["id"]), "removed", 60, processes
        )
        left = await docker.containers.list(all=True, filters=json.dumps({"label": [f"eru.node={docker_node}"]}))
        assert left == []
        assert await pool.fetchval("SELECT used_memory FROM nodes") == 0
    finally:
        await docker.close()


async def test_cli_operations_on_the_sim_node_agent(processes: Processes, pool: asyncpg.Pool, nats_url: str) -> None:
    processes.start("distributor", "eru_distributor")
    processes.start("allocator", "eru_allocator")
    processes.sim_agent(nodes=2, cores=4)
    await wait_for(lambda: pool.fetchval("SELECT count(*) FROM nodes"), 2, 60, processes)
    nats = ("--nats", nats_url)

    async def run(*args: str) -> subprocess.CompletedProcess[str]:
        result = await asyncio.to_thread(eru, *args, *nats)
        assert result.returncode == 0, f"eru {' '.join(args)}: {result.stdout}{result.stderr}"
        return result

    assert "created" in (await run("pod", "create", "extra")).stdout
    assert "extra" in (await run("pod", "ls")).stdout
    assert "added" in (await run("node", "add", "manual-1", "--pod", "extra", "--cpus", "2", "--memory", "4GiB")).stdout
    assert "below its usage" not in (await run("node", "set", "manual-1", "--cpus", "3")).stdout
    assert "cordoned" in (await run("node", "cordon", "manual-1")).stdout
    assert "uncordoned" in (await run("node", "uncordon", "manual-1")).stdout

    deployed = await run(
        "deploy",
        "--pod",
        "p1",
        "--image",
        "app:1",
        "--count",
        "2",
        "--cpu",
        "1",
        "--cpu-bind",
        "--memory",
        "256MiB",
        "--request-id",
        "cli-1",
    )
    assert "completed" in deployed.stdout
    deploy_id = await pool.fetchval("SELECT id FROM deploys WHERE request_id = 'cli-1'")
    watched = await run("deploy", "watch", deploy_id)
    assert f"eru.deploy.{deploy_id}.planned" in watched.stdout
    assert f"eru.deploy.{deploy_id}.completed" in watched.stdout
    assert "completed" in (await run("deploy", "status", "cli-1")).stdout  # by request id too

    first, second = [r["id"] for r in await pool.fetch("SELECT id FROM containers ORDER BY id")]
    listed = await run("container", "ls", "--pod", "p1")
    assert first in listed.stdout
    assert second in listed.stdout
    inspected = await run("container", "inspect", first)
    assert '"state": "running"' in inspected.stdout

    grown = await run("container", "realloc", first, "--cpu", "1", "--memory", "256MiB")
    assert "reallocating 1" in grown.stdout
    await wait_for(lambda: pool.fetchval("SELECT state FROM containers WHERE id = $1", first), "running", 30, processes)
    allocation = json.loads(await pool.fetchval("SELECT allocation FROM containers WHERE id = $1", first))
    assert sum(allocation["cpu_map"].values()) == 200
    assert allocation["memory"] == 512 * 1024**2

    replaced = await run("container", "replace", second, "--image", "app:2")
    assert "replacing" in replaced.stdout
    await wait_for(
        lambda: pool.fetchval("SELECT state FROM containers WHERE id = $1", second), "removed", 30, processes
    )
    new = await pool.fetchval("SELECT id FROM containers WHERE image = 'app:2' AND state = 'running'")
    assert new is not None

    await run("container", "rm", first, new)
    await wait_for(lambda: pool.fetchval("SELECT count(*) FROM containers WHERE state = 'removed'"), 3, 30, processes)
    assert await usage_problems(pool) == []
    assert await pool.fetchval("SELECT sum(used_memory) FROM nodes") == 0
    missing = await asyncio.to_thread(eru, "container", "rm", "no-such-container", *nats)
    assert missing.returncode == 4  # not found (docs/cli.md "Exit codes")
    assert "unknown container" in missing.stderr


async def test_cli_wait_seconds_waits_then_reports_the_expired_wait(
    processes: Processes, pool: asyncpg.Pool, nats_url: str
) -> None:
    processes.start("distributor", "eru_distributor")
    processes.start("allocator", "eru_allocator")
    processes.sim_agent(nodes=1, cores=2)
    await wait_for(lambda: pool.fetchval("SELECT count(*) FROM nodes"), 1, 60, processes)
    base = ["deploy", "--nats", nats_url, "--pod", "p1", "--image", "nginx:1", "--cpu", "1", "--cpu-bind"]

    negative = await asyncio.to_thread(eru, *base, "--count", "1", "--wait-seconds", "-1")
    assert negative.returncode == 2
    assert "--wait-seconds" in negative.stderr  # the option typed, not the model field

    waited = await asyncio.to_thread(eru, *base, "--count", "3", "--wait-seconds", "2")
    assert waited.returncode == 1, waited.stdout + waited.stderr
    assert "wait" in (waited.stdout + waited.stderr).lower()
    status = await pool.fetchval("SELECT status FROM deploys")
    assert status == "failed"
    assert await pool.fetchval("SELECT count(*) FROM containers") == 0
