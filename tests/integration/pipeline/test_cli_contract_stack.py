"""The operator contract against a real allocator (real nats-server and PostgreSQL; docs/cli.md "Exit codes"): every
verb that looks up an id says "not found" the same way — exit 4, and with `-o json` the `eru.cli/error` document on
stdout — and the allocator logs an operator's typo as a warning, never as an error (docs/bus.md)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pipeline_harness import ScriptedPipeline
from structlog.testing import capture_logs

from eru.bus.errors import RemoteError
from eru.domain.messages import CordonRequest, QueryRequest, RemoveRequest
from eru.testing.cli_walk import least_options, lookup_commands, unknown_arguments

ERU = [sys.executable, "-m", "eru.cli"]


def eru(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ERU_OUTPUT": "text"}
    return subprocess.run([*ERU, *args], capture_output=True, text=True, timeout=120, check=False, env=env)


@pytest.mark.timeout(300)  # one `eru` process per verb taking an id (over 30), each a Python start: ~3 s under load
async def test_every_verb_taking_an_id_says_not_found_the_same_way(
    scripted_pipeline: ScriptedPipeline, postgres_dsn: str, tmp_path: Path
) -> None:
    pipe, _agent = await scripted_pipeline(("n1",))
    wrong: dict[str, str] = {}
    for path, command in lookup_commands():
        names = {param.name for param in command.params}
        args = [*path.split(), *unknown_arguments(command), *least_options(path), "-o", "json", "--nats", pipe.nats_url]
        args += ["--state-dir", str(tmp_path)] if "state_dir" in names else []
        args += ["--database", postgres_dsn] if "database" in names else []
        args += ["--timeout", "10"] if "timeout" in names else []
        done = await asyncio.to_thread(eru, *args)
        try:
            error = json.loads(done.stdout)["error"]
        except (ValueError, KeyError, TypeError):
            wrong[path] = f"exit {done.returncode}, no error document: {done.stdout[:200]!r} {done.stderr[:300]!r}"
            continue
        if (done.returncode, error["kind"], error["exit_code"]) != (4, "not_found", 4):
            wrong[path] = f"exit {done.returncode}, {error}"
    assert wrong == {}
    text = await asyncio.to_thread(eru, "container", "rm", "no-such-thing", "--nats", pipe.nats_url)
    assert (text.returncode, text.stdout) == (4, "")
    assert text.stderr.startswith("error: ")
    assert "unknown container 'no-such-thing'" in text.stderr


async def test_an_operators_typo_is_a_warning_in_the_allocators_log(scripted_pipeline: ScriptedPipeline) -> None:
    pipe, _agent = await scripted_pipeline(("n1",))
    with capture_logs() as logs:
        for name, request in (
            ("remove", RemoveRequest(container_ids=["no-such-container"])),
            ("cordon", CordonRequest(node="no-such-node", cordoned=True)),
            ("query", QueryRequest(what="decision", decision_id="no-such-decision")),
            ("query", QueryRequest(what="decision")),  # bad input, not an unknown id
        ):
            with pytest.raises(RemoteError):
                await pipe.op(name, request)
    rejected = [entry for entry in logs if entry["event"] == "bus.request.rejected"]
    assert [(entry["log_level"], entry["code"]) for entry in rejected] == [("warning", "not_found")] * 3 + [
        ("warning", "invalid_input")
    ]
    assert [entry for entry in logs if entry["log_level"] in ("error", "critical", "exception")] == []


async def test_deploy_watch_prints_lines_for_people_or_json_lines(scripted_pipeline: ScriptedPipeline) -> None:
    pipe, _agent = await scripted_pipeline(("n1",))
    deploy_id = await pipe.deploy(count=1)
    assert (await pipe.terminal(deploy_id)).kind == "completed"
    text = await asyncio.to_thread(eru, "deploy", "watch", deploy_id, "--nats", pipe.nats_url)
    assert text.returncode == 0, text.stderr
    assert f"eru.deploy.{deploy_id}.planned  n1=1" in text.stdout
    assert "{'" not in text.stdout  # before: Python dicts
    lines = await asyncio.to_thread(eru, "deploy", "watch", deploy_id, "-o", "json", "--nats", pipe.nats_url)
    assert lines.returncode == 0, lines.stderr
    events = [json.loads(line) for line in lines.stdout.splitlines()]
    assert {event["schema"] for event in events} == {"eru.cli/deploy-event"}
    assert events[-1]["kind"] == "completed"
    assert next(event for event in events if event["kind"] == "planned")["placements"] == {"n1": 1}


async def test_a_refused_deploy_with_o_json_is_the_error_document(scripted_pipeline: ScriptedPipeline) -> None:
    pipe, _agent = await scripted_pipeline(("n1",))
    deploy = ["deploy", "--image", "busybox", "-o", "json", "--nats", pipe.nats_url, "--timeout", "30"]
    nowhere = await asyncio.to_thread(eru, *deploy, "--pod", "nowhere")
    error = json.loads(nowhere.stdout)["error"]  # before: nothing on stdout
    assert (nowhere.returncode, error["kind"], error["field"]) == (2, "invalid_input", "--pod"), (
        nowhere.stdout
    )  # as typed
    assert "unknown pod 'nowhere'" in error["message"]
    too_big = await asyncio.to_thread(eru, *deploy, "--pod", "p1", "--cpu", "1000")
    assert too_big.returncode == 1, too_big.stdout + too_big.stderr
    answer = json.loads(too_big.stdout)
    refused = answer["error"]  # the error document, or the deploy's own document with its error
    assert refused["code"] not in ("invalid_input", "not_found", "internal"), answer
