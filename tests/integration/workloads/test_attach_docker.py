"""`eru run`, `eru container logs -f` and `eru exec` on the real Docker engine, through the real allocator and a
node agent with the docker runtime (docs/node-agent.md "Logs and exec"). Only this test's node and containers are
touched (the engine is shared)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from workload_helpers import Stack, attached_agent, eru, poll, tenant_url

from eru.bus import request
from eru.bus.subjects import allocator_operation
from eru.domain.messages import OperationReply
from eru.domain.tenants import TenantCreateRequest
from eru.nodeagent.engine import L_NODE
from eru_node_agent.runtime.docker import DockerRuntime

pytestmark = [pytest.mark.docker, pytest.mark.timeout(180)]
POD = "attdocker"


@pytest_asyncio.fixture
async def stack(nats_url: str, postgres_dsn: str) -> AsyncIterator[Stack]:
    stack = Stack(nats_url, postgres_dsn)
    await stack.start(enabled=False)
    try:
        yield stack
    finally:
        await stack.close()


async def engine_containers(node: str) -> list[str]:
    """Names of every container of the engine labelled for `node`, running or not."""
    process = await asyncio.create_subprocess_exec(
        "docker", "ps", "-a", "--filter", f"label={L_NODE}={node}", "--format", "{{.Names}}",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await process.communicate()
    return out.decode().split()


async def test_run_prints_hi_exits_3_and_leaves_no_container(
    stack: Stack, busybox_image: str, docker_node: str
) -> None:
    async with attached_agent(stack, DockerRuntime(node=docker_node), docker_node, POD):
        done = await eru(
            "run", "--pod", POD, "--image", busybox_image, "--cpu", "0.1", "--memory", "16MiB",
            "--nats", stack.nats_url, "--", "sh", "-c", "echo hi; exit 3",
        )  # fmt: skip
        assert (done.code, done.out) == (3, "hi\n"), done.err
        await poll(lambda: engine_containers(docker_node), lambda names: names == [])
        states = await stack.states(docker_node)
        assert set(states.values()) == {"removed"}, states
        # two instances, as a document: each one's output and code, the largest code is the exit code
        done = await eru(
            "run", "--pod", POD, "--image", busybox_image, "--cpu", "0.1", "--memory", "16MiB", "--count", "2",
            "-o", "json", "--nats", stack.nats_url, "--", "sh", "-c", "echo hi; exit 3",
        )  # fmt: skip
        doc = json.loads(done.out)
        assert (done.code, doc["schema"], doc["exit_code"], doc["timed_out"]) == (3, "eru.cli/run", 3, False)
        assert [(c["stdout"], c["exit_code"]) for c in doc["containers"]] == [("hi\n", 3), ("hi\n", 3)]
        await poll(lambda: engine_containers(docker_node), lambda names: names == [])


async def test_logs_follow_a_printing_container_and_exec_returns_output_and_code(
    stack: Stack, busybox_image: str, docker_node: str
) -> None:
    script = "echo first; while [ ! -f /tmp/go ]; do sleep 0.1; done; echo second; echo oops >&2; exit 5"
    async with attached_agent(stack, DockerRuntime(node=docker_node), docker_node, POD):
        outcome = await stack.deploy(POD, 1, image=busybox_image, command=["sh", "-c", script])
        assert outcome.kind == "completed", outcome
        [cid] = outcome.started
        follower = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "eru.cli", "container", "logs", cid, "-f", "--nats", stack.nats_url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert follower.stdout is not None
        assert follower.stderr is not None
        assert await asyncio.wait_for(follower.stdout.readline(), 60) == b"first\n"
        assert follower.returncode is None  # still following: the container has not stopped
        # exec: its stdout, its stderr, its exit code; it also lets the container go on
        done = await eru("exec", cid, "--nats", stack.nats_url, "--", "sh", "-c", "echo out; echo err >&2; exit 7")
        assert (done.code, done.out, done.err) == (7, "out\n", "err\n")
        # one line of 1.3 MB, above the bus's max payload (1 MiB): it arrives whole, in chunks
        double = "s=0123456789; for i in " + "x " * 17 + "; do s=$s$s; done; echo $s"  # 10 × 2**17 characters
        done = await eru("exec", cid, "--nats", stack.nats_url, "--", "sh", "-c", double)
        assert (done.code, done.err) == (0, "")
        assert done.out == "0123456789" * 2**17 + "\n"
        done = await eru("exec", cid, "--nats", stack.nats_url, "--", "sh", "-c", ": > /tmp/go")
        assert done.code == 0, done.err
        assert await asyncio.wait_for(follower.stdout.readline(), 60) == b"second\n"
        assert await asyncio.wait_for(follower.stderr.read(), 60) == b"oops\n"
        assert await asyncio.wait_for(follower.wait(), 60) == 0
        # the container exited: its log still reads (the last 3 lines of both streams), exec into it is refused
        done = await eru("container", "logs", cid, "--tail", "3", "--nats", stack.nats_url)
        assert (done.code, done.out, done.err) == (0, "first\nsecond\n", "oops\n")
        done = await eru("exec", cid, "--nats", stack.nats_url, "--", "true")
        assert done.code == 1
        assert done.err == f"error: container_id: {cid!r} is exited, not running: exec needs a running container\n"


async def test_a_tenant_is_refused_on_another_tenants_container(
    stack: Stack, busybox_image: str, docker_node: str
) -> None:
    async with attached_agent(stack, DockerRuntime(node=docker_node), docker_node, POD):
        for tenant in ("a", "b"):
            body = TenantCreateRequest(name=tenant)
            await request(stack.nc, allocator_operation("tenant-create"), body, OperationReply, 10)
        outcome = await stack.deploy(POD, 1, image=busybox_image, command=["sleep", "600"], tenant="a")
        [cid] = outcome.started
        refused = await eru("exec", cid, "--nats", tenant_url(stack.nats_url, "b"), "--", "echo", "x")
        assert refused.code == 1
        assert refused.err == f"error: permission denied: container_id: {cid!r} is not a container of tenant 'b'\n"
        refused = await eru("container", "logs", cid, "--nats", tenant_url(stack.nats_url, "b"))
        assert refused.code == 1
        own = await eru("exec", cid, "--nats", tenant_url(stack.nats_url, "a"), "--", "echo", "mine")
        assert (own.code, own.out) == (0, "mine\n")
