"""One timer for the periodic reports of every node of a sim process (eru_node_agent.periodic): each started node
reports each kind at its interval, a node not started yet is left alone, a report still running is not started
twice, and stop waits for what runs."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

import pytest

from eru.settings import load_settings
from eru_node_agent.agent import NodeAgent
from eru_node_agent.app import build_agents
from eru_node_agent.periodic import Reports


def _agents(count: int) -> list[NodeAgent]:
    settings = load_settings(
        node_agent={"runtime": "sim", "sim_nodes": count, "node": "tick", "heartbeat_interval_seconds": 0.1}
    )
    return build_agents(settings, js=None)


async def _until(condition: Callable[[], bool], reported: asyncio.Event, within: float = 10.0) -> None:
    """Until `condition` holds, looked at after each report."""
    while not condition():
        reported.clear()
        await asyncio.wait_for(reported.wait(), within)


async def test_started_nodes_report_at_their_interval_and_a_running_report_is_not_started_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agents = _agents(3)
    calls: Counter[tuple[str, str]] = Counter()
    release = asyncio.Event()
    reported = asyncio.Event()

    def recorder(agent: NodeAgent) -> object:
        async def report(action: str, interval: float) -> None:
            calls[agent.node, action] += 1
            reported.set()
            if agent.node == "tick-002" and action == "heartbeat":
                await release.wait()  # a slow report: still running when the next is due

        return report

    for agent in agents:
        monkeypatch.setattr(agent, "report", recorder(agent))
    agents[0].started.set()
    agents[1].started.set()  # tick-003 has not started (its engine is not up yet): no report
    stop = asyncio.Event()
    reports = Reports(agents, stop)
    running = asyncio.create_task(reports.run())
    await _until(lambda: calls["tick-001", "heartbeat"] >= 5, reported)
    assert calls["tick-002", "heartbeat"] == 1  # blocked: never started twice
    assert not any(node == "tick-003" for node, _ in calls)
    assert calls["tick-001", "metrics"] <= 2  # its interval is 5 s: at most the first one so far
    release.set()
    await _until(lambda: calls["tick-002", "heartbeat"] >= 3, reported)
    agents[2].started.set()
    await _until(lambda: calls["tick-003", "heartbeat"] >= 2, reported)
    stop.set()
    await asyncio.wait_for(running, 5)
    assert reports.started == sum(calls.values())
