"""`eru workload replace NAME --image NEW` on sim nodes (docs/cli.md "Rolling replace"): a good image replaces every
instance wave by wave; an image whose health check fails stops after the first wave, rolled back, and says which
instances run which image; `eru workload history` lists the images the workload has run."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiodocker
import pytest
from colocation_harness import sim_node
from pipeline_harness import GiB, Pipeline, eru_cli

from eru.nodeagent.load import UNHEALTHY_LABEL
from eru.testing.pytest_docker import busybox_image, docker_engine, docker_node
from eru_node_agent.agent import NodeAgent
from eru_node_agent.config import AgentConfig
from eru_node_agent.runtime.docker import DockerRuntime
from eru_node_agent.state import MemoryStateStore

__all__ = ["busybox_image", "docker_engine", "docker_node"]

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]
IMAGES = "SELECT image, count(*) AS n FROM containers WHERE workload = 'app' AND state = 'running' GROUP BY image"


async def _images(pipeline: Pipeline) -> dict[str, int]:
    return {row["image"]: row["n"] for row in await pipeline.pool.fetch(IMAGES)}


async def test_a_rolling_replace_goes_wave_by_wave_and_a_bad_image_is_rolled_back_after_one_wave(
    nats_url: str, postgres_dsn: str
) -> None:
    pipeline = Pipeline(nats_url, postgres_dsn)
    await pipeline.start()
    cli: tuple[str, ...] = ("--nats", nats_url, "--healthy-within", "5s", "-o", "json")
    try:
        async with sim_node(pipeline, "sim-a"), sim_node(pipeline, "sim-b"):
            await pipeline.wait_for(lambda: pipeline.pool.fetchval("SELECT count(*) FROM nodes"), 2)
            workload: dict[str, Any] = {
                "name": "app",
                "image": "app:1",
                "resources": {"cpu_request": 1, "memory_request": GiB},
                "health_command": ["check"],
                "health_interval_seconds": 0.5,
                "labels": {UNHEALTHY_LABEL: "app:bad"},  # the sim's check fails on image app:bad only
            }
            deploy_id = await pipeline.deploy(count=3, workload=workload)
            assert (await pipeline.terminal(deploy_id)).kind == "completed"

            code, out = await eru_cli("workload", "replace", "app", "--image", "app:2", "--max-parallel", "2", *cli)
            assert code == 0, out
            report = json.loads(out)
            assert report["schema"] == "eru.cli/workload-replace"
            assert report["outcome"] == "completed"
            assert [len(w["replaced"]) for w in report["waves"]] == [2, 1]
            assert all(r["result"] == "ok" for w in report["waves"] for r in w["replaced"])
            assert {image: len(ids) for image, ids in report["running"].items()} == {"app:2": 3}
            assert await _images(pipeline) == {"app:2": 3}

            code, out = await eru_cli("workload", "replace", "app", "--image", "app:bad", *cli)
            assert code == 1, out  # refused: the rollout stopped
            error = json.loads(out)
            assert error["schema"] == "eru.cli/error"
            assert "wave 1 failed" in error["error"]["message"]
            assert "3 on app:2" in error["error"]["message"]  # which instances run which image
            details = error["error"]["details"]["rollout"]
            assert details["outcome"] == "rolled_back"
            assert len(details["waves"]) == 1  # stopped after the first wave
            (failed,) = details["waves"][0]["replaced"]
            assert failed["result"] == "failed"
            assert "rolled back" in failed["reason"]
            assert {image: len(ids) for image, ids in details["running"].items()} == {"app:2": 3}
            assert await _images(pipeline) == {"app:2": 3}

            code, out = await eru_cli("workload", "history", "app", "--nats", nats_url, "-o", "json")
            assert code == 0, out
            history = json.loads(out)
            assert [row["image"] for row in history["images"]] == ["app:1", "app:2", "app:bad"]
            assert [row["live"] for row in history["images"]] == [0, 3, 0]
    finally:
        await pipeline.close()


@contextlib.asynccontextmanager
async def _images_with_env(base: str, url: str | None, tags: dict[str, str]) -> AsyncIterator[None]:
    """Images `tag` = `base` + `ENV <value>` (docker commit of a created container), removed afterwards."""
    docker = aiodocker.Docker(url=url)
    try:
        created = await docker._query_json(
            "containers/create", "POST", data=json.dumps({"Image": base, "Cmd": ["true"]})
        )
        try:
            for tag, env in tags.items():
                repo, version = tag.split(":")
                params = {"container": created["Id"], "repo": repo, "tag": version, "changes": f"ENV {env}"}
                await docker._query_json("commit", "POST", params=params)
        finally:
            await docker._query_json(f"containers/{created['Id']}", "DELETE", params={"force": "true"})
        yield
    finally:
        for tag in tags:
            with contextlib.suppress(aiodocker.DockerError):
                await docker._query_json(f"images/{tag}", "DELETE", params={"force": "true"})
        await docker.close()


@pytest.mark.docker
async def test_on_docker_a_rolling_replace_to_an_image_whose_check_fails_stops_after_the_first_wave(
    nats_url: str, postgres_dsn: str, busybox_image: str, docker_node: str, docker_engine: str | None
) -> None:
    good, bad = f"eru-test/app:{docker_node}-good", f"eru-test/app:{docker_node}-bad"
    pipeline = Pipeline(nats_url, postgres_dsn)
    await pipeline.start()
    config = AgentConfig(node=docker_node, pod="p1", heartbeat_interval_seconds=0.5, stop_timeout_seconds=1.0)
    agent = NodeAgent(config, DockerRuntime(url=docker_engine), pipeline.js, MemoryStateStore())
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        async with _images_with_env(busybox_image, docker_engine, {good: "BAD=0", bad: "BAD=1"}):
            await asyncio.wait_for(agent.started.wait(), 30)
            workload: dict[str, Any] = {
                "name": "app",
                "image": good,
                "command": ["sleep", "600"],
                "resources": {"cpu_request": 0.1, "memory_request": 16 * 1024**2},
                "health_command": ["sh", "-c", 'test "$BAD" != 1'],  # fails in the bad image only
                "health_interval_seconds": 0.5,
                "health_retries": 2,
            }
            deploy_id = await pipeline.deploy(count=2, workload=workload)
            assert (await pipeline.terminal(deploy_id)).kind == "completed"
            before = {r["id"] for r in await pipeline.pool.fetch("SELECT id FROM containers WHERE workload = 'app'")}

            code, out = await eru_cli(
                "workload", "replace", "app", "--image", bad, "--healthy-within", "5s", "--nats", nats_url, "-o", "json"
            )
            assert code == 1, out
            rollout = json.loads(out)["error"]["details"]["rollout"]
            assert rollout["outcome"] == "rolled_back"
            assert len(rollout["waves"]) == 1  # the second instance was never touched
            (failed,) = rollout["waves"][0]["replaced"]
            assert failed["result"] == "failed"
            assert failed["old"] in before
            assert rollout["running"] == {good: sorted(before)}  # both still run the good image
            assert await _images(pipeline) == {good: 2}
            gone = await pipeline.pool.fetchrow("SELECT state, image FROM containers WHERE id = $1", failed["new"])
            assert (gone["state"], gone["image"]) == ("failed", bad)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await agent.runtime.close()
        await pipeline.close()
