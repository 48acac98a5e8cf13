"""The wire trace's per-hop figures (bench/trace_deploys.py): each hop is the difference of the right two times."""

from __future__ import annotations

import json
from pathlib import Path

from bench.trace_deploys import UUID7, analyse


def _uuid7(ms: int, tail: str) -> str:
    text = f"{ms:012x}7{tail:0>19}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def test_hops_are_the_differences_of_the_messages_seen(tmp_path: Path) -> None:
    offset = 1_000.0  # wall = perf + offset
    deploy = _uuid7(1_000_100, "1")  # decided at wall 1000.1 = perf 0.1
    assert UUID7.fullmatch(deploy.encode())
    other = _uuid7(1_000_200, "2")  # a deploy of a request the client did not send: ignored
    rows = [
        [0.30, "_INBOX.x.req1", [deploy]],  # the allocator's answer names the deploy
        [0.35, f"eru.deploy.{deploy}.planned", []],
        [0.36, "eru.node.sim-001.cmd.batch", [deploy, other]],
        [0.50, "eru.container.sim-001.batch", [deploy]],
        [0.80, f"eru.deploy.{deploy}.completed", []],
        [0.90, f"eru.deploy.{other}.completed", []],
        [0.95, "eru.node.sim-001.cmd.batch", [deploy]],  # a later message naming it again: the first counts
    ]
    trace = tmp_path / "trace"
    trace.write_text(
        "\n".join([json.dumps({"offset": offset, "sent": {"req1": 0.0, "req2": 0.05}}), *map(json.dumps, rows)])
    )
    hops = analyse(trace)
    figures = {name: hop["p50_ms"] for name, hop in hops.items()}
    assert figures == {
        "sent→decided": 100.0,
        "decided→reply": 200.0,
        "sent→reply": 300.0,
        "decided→planned_event": 250.0,
        "planned_event→command": 10.0,
        "command→agent_event": 140.0,
        "agent_event→completed": 300.0,
        "sent→completed": 800.0,
    }
    assert {hop["n"] for hop in hops.values()} == {1}  # req2 was never answered: in no hop


def test_the_senders_ce_time_splits_the_agent_and_events_hops(tmp_path: Path) -> None:
    offset = 1_000.0
    deploy = _uuid7(1_000_100, "1")
    rows = [
        [0.30, "_INBOX.x.req1", [deploy], "1970-01-01T00:16:40.300000Z"],
        [0.36, "eru.node.sim-001.cmd.batch", [deploy], "1970-01-01T00:16:40.100000Z"],
        # the agent made its event at wall 1000.42 (perf 0.42), it was seen at 0.50
        [0.50, "eru.container.sim-001.batch", [deploy], "1970-01-01T00:16:40.420000Z"],
        # the events batch made the terminal event at perf 0.65, seen at 0.80
        [0.80, f"eru.deploy.{deploy}.completed", [], "1970-01-01T00:16:40.650000Z"],
    ]
    trace = tmp_path / "trace"
    trace.write_text("\n".join([json.dumps({"offset": offset, "sent": {"req1": 0.0}}), *map(json.dumps, rows)]))
    figures = {name: hop["p50_ms"] for name, hop in analyse(trace).items()}
    assert figures["command→agent_ran"] == 60.0
    assert figures["agent_ran→agent_event"] == 80.0
    assert figures["agent_event→batch_ended"] == 150.0
    assert figures["batch_ended→completed"] == 150.0
    assert figures["agent_event→completed"] == 300.0
