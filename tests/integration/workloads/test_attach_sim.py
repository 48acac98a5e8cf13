"""`eru container logs`, `eru exec` and `eru run` through the real allocator and a node agent on the sim runtime
(docs/node-agent.md "Logs and exec"): the verbs' output and exit codes, and each bad input as one line with its exit
code (docs/cli.md: 2 invalid input, 4 not found, 1 refused, 3 unavailable)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from workload_helpers import Stack, attached_agent, eru, poll, tenant_url

from eru.bus import request
from eru.bus.codec import decode
from eru.bus.subjects import allocator_operation, attach_stream
from eru.domain.attach import AttachChunk, AttachReply, AttachRequest
from eru.domain.messages import OperationReply
from eru.domain.tenants import TenantCreateRequest
from eru_node_agent import attach as agent_attach
from eru_node_agent.runtime.sim import SimRuntime

pytestmark = pytest.mark.timeout(120)
NODE, POD = "att-sim", "attpod"


@pytest_asyncio.fixture
async def stack(nats_url: str, postgres_dsn: str) -> AsyncIterator[Stack]:
    stack = Stack(nats_url, postgres_dsn)
    # no sweep during a test (it waits its interval first): a node made silent stays 'down' until asked about, its
    # containers not yet swept to 'lost' (docs/node-agent.md "Health and node TTL")
    await stack.start(allocator={"sweep_interval_seconds": 600.0}, enabled=False)
    try:
        yield stack
    finally:
        await stack.close()


async def test_logs_follow_and_exec_on_a_simulated_container(stack: Stack) -> None:
    runtime = SimRuntime(NODE)
    async with attached_agent(stack, runtime, NODE, POD):
        outcome = await stack.deploy(POD, 1, command=["sleep", "600"])
        [cid] = outcome.started
        done = await eru("container", "logs", cid, "--nats", stack.nats_url)
        assert (done.code, done.out, done.err) == (0, "sleep 600\n", "")
        done = await eru("exec", cid, "--nats", stack.nats_url, "--", "sh", "-c", "echo hi")
        assert (done.code, done.out) == (0, "sh -c echo hi\n")
        doc = json.loads((await eru("exec", cid, "-o", "json", "--nats", stack.nats_url, "--", "true")).out)
        assert (doc["schema"], doc["stdout"], doc["exit_code"], doc["node"]) == ("eru.cli/exec", "true\n", 0, NODE)
        # a container that exits with 3 after a moment: -f follows it to its end and reports its code
        labels = {"eru.sim.exit_after": "1", "eru.sim.exit_code": "3"}
        outcome = await stack.deploy(POD, 1, command=["echo", "bye"], labels=labels)
        [short] = outcome.started
        done = await eru("container", "logs", short, "-f", "-o", "json", "--nats", stack.nats_url)
        doc = json.loads(done.out)
        assert (done.code, doc["schema"], doc["stdout"], doc["exit_code"]) == (
            0,
            "eru.cli/container-logs",
            "echo bye\n",
            3,
        )


async def test_bad_input_is_one_line_with_its_exit_code(stack: Stack) -> None:
    async with attached_agent(stack, SimRuntime(NODE), NODE, POD, heartbeat_interval_seconds=1e6):
        outcome = await stack.deploy(POD, 1, command=["sleep", "600"])
        [cid] = outcome.started
        url = stack.nats_url
        unknown = await eru("exec", "c-nowhere", "--nats", url, "--", "true")
        assert unknown.code == 4
        assert unknown.err == "error: container_id: unknown container 'c-nowhere'\n"
        too_long = await eru("exec", cid, "--nats", url, "--", *["x"] * 257)
        assert (too_long.code, too_long.err) == (2, "error: CMD: 257 arguments, above the limit of 256\n")
        huge = await eru("exec", cid, "-o", "json", "--nats", url, "--", "x" * 40_000)
        error = json.loads(huge.out)["error"]
        assert (huge.code, error["field"]) == (2, "CMD")
        assert "above the limit of 32,768" in error["message"]
        nothing = await eru("exec", cid, "--nats", url)
        assert nothing.code == 2
        assert "Missing argument 'CMD'" in nothing.err
        # another tenant's container: refused, exit 1, and it learns nothing (the same answer as for an unknown id)
        for tenant in ("a", "b"):
            body = TenantCreateRequest(name=tenant)
            await request(stack.nc, allocator_operation("tenant-create"), body, OperationReply, 10)
        owned = await stack.deploy(POD, 1, command=["sleep", "600"], tenant="a")
        [theirs] = owned.started
        refused = await eru("exec", theirs, "--nats", tenant_url(url, "b"), "--", "true")
        assert refused.code == 1
        assert refused.err == f"error: permission denied: container_id: {theirs!r} is not a container of tenant 'b'\n"
        mine = await eru("exec", theirs, "--nats", tenant_url(url, "a"), "--", "true")
        assert (mine.code, mine.out) == (0, "true\n")
        # its node goes silent past node_down_after_seconds (30 s): a clear 'down', exit 3
        await stack.pool.execute(
            "UPDATE node_status SET heartbeat_at = now() - interval '1 hour' WHERE name = $1", NODE
        )
        down = await eru("container", "logs", cid, "--nats", url)
        assert down.code == 3
        assert f"is on node {NODE}, which is down (no heartbeat for" in down.err
        assert len(down.err.splitlines()) == 1


async def test_run_with_a_timeout_removes_what_it_started_and_exits_124(stack: Stack) -> None:
    async with attached_agent(stack, SimRuntime(NODE), NODE, POD):
        done = await eru(
            "run", "--pod", POD, "--image", "busybox", "--memory", "16MiB", "--count", "2", "--timeout", "1s",
            "--nats", stack.nats_url, "--", "sleep", "600",
        )  # fmt: skip
        assert done.code == 124, done.err
        # each instance's one line (the sim's echo of its command), prefixed by instance
        assert sorted(done.out.splitlines()) == ["[1] sleep 600", "[2] sleep 600"]
        states = await poll(lambda: stack.states(NODE), lambda s: len(s) == 2 and set(s.values()) == {"removed"})
        assert len(states) == 2
        done = await eru(
            "run", "--pod", POD, "--image", "busybox", "--memory", "16MiB", "--timeout", "0.5", "-o", "json",
            "--nats", stack.nats_url, "--", "sleep", "600",
        )  # fmt: skip
        doc = json.loads(done.out)
        assert (done.code, doc["schema"], doc["exit_code"], doc["timed_out"]) == (124, "eru.cli/run", 124, True)
        await poll(lambda: stack.states(NODE), lambda s: len(s) == 3 and set(s.values()) == {"removed"})


async def test_ctrl_c_on_run_removes_its_containers_and_exits_130(stack: Stack) -> None:
    async with attached_agent(stack, SimRuntime(NODE), NODE, POD):
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "eru.cli", "run", "--pod", POD, "--image", "busybox", "--memory", "16MiB",
            "--nats", stack.nats_url, "--", "sleep", "600",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONFAULTHANDLER": "1"},
            # as a terminal's foreground job: a test run started in the background (`pytest … &`) ignores SIGINT
            # in every process it starts, and a program that inherits SIGINT ignored keeps ignoring it (the
            # hang this test showed three times, `SigIgn` 0x1001007: SIGHUP, SIGINT, SIGQUIT)
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
        assert process.stdout is not None
        assert await asyncio.wait_for(process.stdout.readline(), 60) == b"sleep 600\n"  # running, followed
        [cid] = (await stack.states(NODE)).keys()
        process.send_signal(signal.SIGINT)
        try:
            code = await asyncio.wait_for(process.wait(), 60)
        except TimeoutError:
            # failed twice in full runs, never alone: say how the signal stood and where the CLI was
            status = (await asyncio.to_thread(Path(f"/proc/{process.pid}/status").read_text)).splitlines()
            masks = [line for line in status if line.startswith(("SigBlk", "SigIgn", "SigCgt", "SigPnd", "ShdPnd"))]
            process.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            _, err = await asyncio.wait_for(process.communicate(), 30)
            raise AssertionError(f"eru run did not exit after SIGINT: {masks}\n{err.decode()[-6000:]}") from None
        assert code == 130
        await poll(lambda: stack.states(NODE), lambda s: s == {cid: "removed"})


async def test_a_session_whose_client_is_gone_stops_streaming(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_attach, "PING_SECONDS", 0.2)
    monkeypatch.setattr(agent_attach, "PING_TIMEOUT_SECONDS", 0.5)
    async with attached_agent(stack, SimRuntime(NODE), NODE, POD) as (_agent, server):
        outcome = await stack.deploy(POD, 1, command=["sleep", "600"])
        [cid] = outcome.started
        pings = 0

        async def client(msg: object) -> None:
            nonlocal pings
            chunk = decode(msg.data, AttachChunk)  # type: ignore[attr-defined]
            if chunk.kind == "ping":
                pings += 1
                await stack.nc.publish(msg.reply, b"")  # type: ignore[attr-defined]

        ask = AttachRequest(container_id=cid, action="logs", session="gone-1", follow=True)
        subscription = await stack.nc.subscribe(attach_stream(None, ask.session), cb=client)
        await request(stack.nc, allocator_operation("attach"), ask, AttachReply, 10)
        await poll(lambda: asyncio.sleep(0, pings), lambda n: n >= 3)  # answered: the session goes on
        assert len(server.sessions[NODE]) == 1
        await subscription.unsubscribe()  # the client is gone: two pings unanswered end the session
        await poll(lambda: asyncio.sleep(0, len(server.sessions[NODE])), lambda n: n == 0)
