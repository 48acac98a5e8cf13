"""Reading recorded history from a real nats-server: a deploy's story across streams, ranges, live tail, the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from eru.bus import subjects
from eru.bus.consumer import ConsumerOptions, ensure_consumer
from eru.bus.envelope import new_envelope
from eru.bus.history import Selection, read_history, read_stream
from eru.bus.publish import publish
from eru.bus.streams import DEPLOY, EVENTS, NODE, provision_streams
from eru.cli.events_commands import parse_when
from eru.domain import ContainerEvent, DeployEvent, DeployRequest, NodeCommand


async def _record_a_deploy(js: Any, deploy_id: str, node: str) -> list[str]:
    """Publish the messages one deploy leaves behind, in causal order; returns their ids. The node's agent has its
    consumer but has not acted on the command yet (ERU_NODE keeps commands only until acted on)."""
    await ensure_consumer(js, NODE, f"node-agent-{node}", subjects.node_commands(node), ConsumerOptions())
    planned = new_envelope("eru.deploy.planned", "allocator/a1", correlation_id=deploy_id)
    await publish(
        js, subjects.deploy_event(deploy_id, "planned"), DeployEvent(deploy_id=deploy_id, kind="planned"), planned
    )
    command_envelope = planned.caused("eru.node.cmd.create", "allocator/a1")
    command = NodeCommand(command_id=command_envelope.id, node=node, kind="create", container_id="c1")
    await publish(js, subjects.node_command(node, "create"), command, command_envelope)
    started_envelope = command_envelope.caused("eru.container.started", f"node-agent/{node}")
    started = ContainerEvent(node=node, container_id="c1", deploy_id=deploy_id, kind="started")
    await publish(js, subjects.container_event(node, "started"), started, started_envelope)
    done = started_envelope.caused("eru.deploy.completed", "allocator/a1")
    await publish(
        js, subjects.deploy_event(deploy_id, "completed"), DeployEvent(deploy_id=deploy_id, kind="completed"), done
    )
    return [planned.id, command_envelope.id, started_envelope.id, done.id]


async def test_the_story_of_a_deploy_spans_streams_in_order(js: Any) -> None:
    await provision_streams(js)
    ids = await _record_a_deploy(js, "d1", "n1")
    await _record_a_deploy(js, "d2", "n2")
    story = await read_history(js, selection=Selection(deploy="d1"))
    assert [m.envelope.id for m in story if m.envelope] == ids
    assert [m.stream for m in story] == [DEPLOY, NODE, EVENTS, DEPLOY]
    assert story[2].body["container_id"] == "c1"
    about_n2 = await read_history(js, selection=Selection(node="n2"))
    assert {m.correlation_id for m in about_n2} == {"d2"}
    assert len(about_n2) == 2  # the command and the container event name the node; deploy events do not
    only_types = await read_history(js, selection=Selection(type_pattern="eru.deploy.*"))
    assert [m.type for m in only_types] == ["eru.deploy.planned", "eru.deploy.completed"] * 2


async def test_a_command_acted_on_leaves_the_story_and_its_result_stays(js: Any) -> None:
    await provision_streams(js)
    ids = await _record_a_deploy(js, "d1", "n1")
    subscription = await js.pull_subscribe_bind(durable="node-agent-n1", stream=NODE)
    (command,) = await subscription.fetch(1, timeout=5)
    await command.ack_sync()
    async with asyncio.timeout(10):
        while len(story := await read_history(js, selection=Selection(deploy="d1"))) != 3:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    assert [m.envelope.id for m in story if m.envelope] == [ids[0], ids[2], ids[3]]
    assert [m.stream for m in story] == [DEPLOY, EVENTS, DEPLOY]


async def test_ranges_by_time_and_sequence(js: Any) -> None:
    await provision_streams(js)
    await _record_a_deploy(js, "d1", "n1")
    future = datetime.now(UTC) + timedelta(hours=1)
    assert await read_history(js, since=future) == []
    everything = [m async for m in read_stream(js, DEPLOY)]
    assert [m.sequence for m in everything] == [1, 2]
    assert [m.sequence async for m in read_stream(js, DEPLOY, from_sequence=2)] == [2]
    consumers = await js.consumers_info(DEPLOY)
    assert consumers == []  # readers leave no consumer behind


async def test_live_tail_sees_new_messages_only(js: Any) -> None:
    await provision_streams(js)
    await _record_a_deploy(js, "old", "n1")
    seen: list[str] = []

    async def follow() -> None:
        async for message in read_stream(js, DEPLOY, live=True, idle_seconds=0.2):
            seen.append(message.correlation_id)
            if len(seen) == 2:
                return

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0.5)
    await _record_a_deploy(js, "new", "n1")
    await asyncio.wait_for(follower, 10)
    assert seen == ["new", "new"]


EVENTS_CLI = [sys.executable, "-m", "eru.cli", "events"]


async def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`eru events …` as a process, never blocking this event loop; the test's own timeout is the hang guard."""
    process = await asyncio.create_subprocess_exec(
        *EVENTS_CLI, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    return subprocess.CompletedProcess(args, process.returncode or 0, out.decode(), err.decode())


async def test_cli_show_and_bad_input(js: Any, nats_url: str) -> None:
    await provision_streams(js)
    ids = await _record_a_deploy(js, "d7", "n3")
    # Five independent `eru` processes at once: each costs ~0.7 s of CPU to start, 20 s or more at load 20–40 (seen
    # under `stress --cpu 2` beside other suites), so one after the other they outlasted this test's timeout.
    shown, missing, ranged, two_streams, bad = await asyncio.gather(
        _cli("show", "d7", "--json", "--nats", nats_url),
        _cli("show", "nope", "--nats", nats_url),
        _cli("replay", "--from-seq", "2", "--stream", "ERU_DEPLOY", "--json", "--nats", nats_url),
        _cli("replay", "--from-seq", "2", "--nats", nats_url),
        _cli("replay", "--since", "yesterday-ish", "--nats", nats_url),
    )
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert (document["schema"], document["schema_version"], document["subject"]) == ("eru.cli/events-show", 1, "d7")
    assert [message["id"] for message in document["messages"]] == ids
    assert missing.returncode == 4  # not found (docs/cli.md "Exit codes")
    assert "nothing recorded about 'nope'" in missing.stderr
    assert ranged.returncode == 0, ranged.stderr
    assert [json.loads(line)["seq"] for line in ranged.stdout.splitlines()] == [2]
    assert two_streams.returncode == 2
    assert "from_seq" in two_streams.stderr
    assert bad.returncode == 2
    assert "since" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_parse_when() -> None:
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    assert parse_when("10m", "since", now) == now - timedelta(minutes=10)
    assert parse_when("1.5h", "since", now) == now - timedelta(minutes=90)
    assert parse_when("2026-01-01T11:00:00", "since", now) == now - timedelta(hours=1)
    with pytest.raises(Exception, match="since"):
        parse_when("soon", "since", now)


async def test_cli_show_starts_from_the_original_request_and_prints_no_python_reprs(js: Any, nats_url: str) -> None:
    await provision_streams(js)
    request_envelope = new_envelope("eru.deploy.request", "eru-cli")
    request = DeployRequest.model_validate(
        {"pod": "p1", "count": 2, "workload": {"name": "web", "image": "busybox", "command": ["sleep", "60"]}}
    )
    await publish(js, subjects.DEPLOY_REQUEST, request, request_envelope)
    planned = new_envelope("eru.deploy.planned", "allocator/a1", correlation_id="d9", causation=request_envelope)
    event = DeployEvent(deploy_id="d9", kind="planned", placements={"n1": 2})
    await publish(js, subjects.deploy_event("d9", "planned"), event, planned)
    shown = await asyncio.to_thread(
        subprocess.run,
        [*EVENTS_CLI, "show", "d9", "--nats", nats_url],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "100"},
    )
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert text.index("eru.deploy.request") < text.index("eru.deploy.d9.planned")  # the request comes first
    assert "- sleep" in text  # the whole request, as YAML: lists as lists, nothing cut
    assert "{'" not in text
    assert "['" not in text
    short = await asyncio.to_thread(
        subprocess.run, [*EVENTS_CLI, "show", "d9", "--short", "--nats", nats_url], capture_output=True, text=True
    )
    assert short.returncode == 0, short.stderr
    assert 'command":["sleep","60"]' in short.stdout or "…" in short.stdout
    assert "{'" not in short.stdout
    as_yaml = await asyncio.to_thread(
        subprocess.run, [*EVENTS_CLI, "show", "d9", "-o", "yaml", "--nats", nats_url], capture_output=True, text=True
    )
    assert "schema: eru.cli/events-show" in as_yaml.stdout
