"""`eru dlq ls | show | redrive` as an operator runs them (subprocesses against a real pipeline): a dead-lettered
deploy is listed and explained, redriving it deploys it once, a client's fresh retry of a dead-lettered request is
planned, and a redriven request is still deduplicated by its request id (docs/operations.md "Dead letters")."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest
import pytest_asyncio
from pipeline_harness import Pipeline, ScriptedNodeAgent, ScriptedPipeline

from eru.bus import connect, new_envelope
from eru.bus.codec import JSON
from eru.bus.envelope import H_CONTENT_TYPE
from eru.bus.errors import RemoteError
from eru.bus.streams import DLQ
from eru.bus.subjects import DEPLOY_REQUEST
from eru_distributor.app import start_distributor

ERU = [sys.executable, "-m", "eru.cli"]


def eru(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ERU, *args], capture_output=True, text=True, timeout=60, check=False)


async def eru_async(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(eru, *args)


@pytest_asyncio.fixture
async def pipeline(scripted_pipeline: ScriptedPipeline) -> tuple[Pipeline, ScriptedNodeAgent]:
    # The scripted node never beats: with the default 30 s, a loaded machine running the five deliveries and the CLI
    # processes below can outlast it and find the node down (seen at load 20: no_schedulable_node after 33 s).
    return await scripted_pipeline(("n1",), start={"distributor": False, "node_down_after_seconds": 600.0})


async def add_distributor(pipe: Pipeline) -> None:
    nc = await connect(pipe.nats_url, name="distributor")
    server = await start_distributor(nc, source="distributor/test")
    pipe._closers += [server.stop, nc.close]


async def dead_letter_a_deploy(pipe: Pipeline, request_id: str) -> None:
    """Without a distributor the request is retried max_deliver times, then dead-lettered."""
    with pytest.raises(RemoteError) as refused:
        await pipe.deploy(count=1, request_id=request_id, within=30.0)
    assert refused.value.code == "unavailable"


async def deploys_of(pipe: Pipeline, request_id: str) -> int:
    count: int = await pipe.pool.fetchval("SELECT count(*) FROM deploys WHERE request_id = $1", request_id)
    return count


async def test_list_show_and_redrive_a_dead_lettered_deploy(pipeline: tuple[Pipeline, ScriptedNodeAgent]) -> None:
    pipe, agent = pipeline
    await dead_letter_a_deploy(pipe, "r-7")
    listed = await eru_async("dlq", "ls", "--json", "--nats", pipe.nats_url)
    assert listed.returncode == 0, listed.stderr
    (letter,) = json.loads(listed.stdout)["dead_letters"]
    assert letter["subject"] == DEPLOY_REQUEST
    assert letter["reason"].startswith("gave up after 5 deliveries: distributor unavailable")
    table = await eru_async("dlq", "ls", "--nats", pipe.nats_url)
    assert "gave up after 5" in table.stdout
    shown = await eru_async("dlq", "show", str(letter["id"]), "-o", "json", "--nats", pipe.nats_url)
    assert shown.returncode == 0, shown.stderr
    detail = json.loads(shown.stdout)
    assert detail["body"]["request_id"] == "r-7"
    assert detail["consumer"] == "allocator-deploy"

    await add_distributor(pipe)
    redriven = await eru_async("dlq", "redrive", str(letter["id"]), "--nats", pipe.nats_url)
    assert redriven.returncode == 0, redriven.stderr
    assert "redriven 1 dead letter" in redriven.stdout
    await pipe.wait_for(lambda: deploys_of(pipe, "r-7"), 1)
    deploy_id = await pipe.pool.fetchval("SELECT id FROM deploys WHERE request_id = 'r-7'")
    assert (await pipe.terminal(deploy_id)).kind == "completed"
    # gone from the dead letters; redriving it again is refused naming the id
    again = await eru_async("dlq", "redrive", str(letter["id"]), "--nats", pipe.nats_url)
    assert again.returncode == 4  # not found (docs/cli.md "Exit codes")
    assert f"no dead letter {letter['id']}" in again.stderr
    assert (await pipe.js.stream_info(DLQ)).state.messages == 0
    assert len([c for c in agent.commands if c.kind == "create"]) == 1


async def test_a_redriven_request_that_deployed_meanwhile_deploys_once(
    pipeline: tuple[Pipeline, ScriptedNodeAgent],
) -> None:
    pipe, agent = pipeline
    await dead_letter_a_deploy(pipe, "r-8")
    await add_distributor(pipe)
    # the client tries again with the same request id: a new message, so it is planned (not a replay)
    deploy_id = await pipe.deploy(count=1, request_id="r-8")
    assert (await pipe.terminal(deploy_id)).kind == "completed"
    listed = json.loads((await eru_async("dlq", "ls", "--json", "--nats", pipe.nats_url)).stdout)
    (letter,) = listed["dead_letters"]
    redriven = await eru_async("dlq", "redrive", "--all", "--nats", pipe.nats_url)
    assert redriven.returncode == 0, redriven.stderr

    async def handled() -> bool:
        info = await pipe.js.consumer_info("ERU_DEPLOY", "allocator-deploy")
        return info.num_pending == 0 and info.num_ack_pending == 0

    await pipe.wait_for(handled, True)
    assert await deploys_of(pipe, "r-8") == 1, "the redrive was answered with the existing deploy"
    assert len([c for c in agent.commands if c.kind == "create"]) == 1
    assert letter["id"] > 0


async def test_redrive_all_of_many_shows_progress_and_reports_each(
    pipeline: tuple[Pipeline, ScriptedNodeAgent],
) -> None:
    pipe, _agent = pipeline
    headers: dict[str, Any] = {H_CONTENT_TYPE: JSON}
    for _ in range(25):  # 25 bodies that never decode: each is rejected and dead-lettered
        await pipe.js.publish(DEPLOY_REQUEST, b"{", headers={**new_envelope("t", "test").to_headers(), **headers})

    async def dead() -> int:
        count: int = (await pipe.js.stream_info(DLQ)).state.messages
        return count

    await pipe.wait_for(dead, 25)
    redriven = await eru_async("dlq", "redrive", "--all", "--json", "--nats", pipe.nats_url)
    assert redriven.returncode == 0, redriven.stderr
    result = json.loads(redriven.stdout)
    assert len(result["redriven"]) == 25
    assert result["failed"] == []
    # rejected again (they still do not decode) and dead-lettered again: never lost, never deployed
    await pipe.wait_for(dead, 25)
    assert await pipe.pool.fetchval("SELECT count(*) FROM deploys") == 0
