"""The periodic reports of every node a process serves — heartbeat, metrics, inventory, summary — from one timer
(docs/node-agent.md "Many simulated nodes in one process").

One node's agent runs four loops of its own. A sim process serving 500 nodes ran 2,000 of them, each waking with
`asyncio.wait_for` (a task and a timer per wait, ~900 wakes per second at 1,000 nodes); here one loop keeps a heap of
what is due when, wakes at most every `TICK` seconds and starts what is due as a task. Each node's reports keep their
interval and their spread over it (the same per-node offset as its own loops), a report still running when its next
one is due is skipped (as its own loop would have waited), and a node is reported on only once it has started.

Some reports are the process's, not each node's: the summary (one line for all its nodes) and, for a process whose
nodes take their commands as a group, the heartbeat (one `NodeHeartbeats` message for all of them,
`eru_node_agent.heartbeats`) and the flush of the inventories its nodes took (one `NodeInventories` message a second,
`eru_node_agent.group_inventories`).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections.abc import Sequence

import structlog

from eru_node_agent.agent import NodeAgent
from eru_node_agent.group_inventories import FLUSH_SECONDS, attach
from eru_node_agent.heartbeats import group_heartbeat_once, process_summary

log = structlog.get_logger()
TICK = 0.05  # seconds: what is due within one tick starts together
PROCESS = -1  # the index of the process's own reports in the heap


class Reports:
    """The periodic reports of `agents`, until `stop`."""

    def __init__(self, agents: Sequence[NodeAgent], stop: asyncio.Event, group: str | None = None) -> None:
        self.agents = list(agents)
        self.stop = stop
        self.group = group  # the command group: its nodes' heartbeats and inventories go out as one message
        # made before any node starts, so even the inventories at start go with the others
        self.inventories = attach(self.agents, group) if group is not None and self.agents else None
        self.started = 0  # reports started (a figure for tests)
        self._running: set[tuple[int, str]] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        """Start every report when due; at stop, wait for those running."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        due: list[tuple[float, int, str, float]] = []
        process = self._process_actions()
        for index, agent in enumerate(self.agents):
            for action, interval in agent.report_intervals().items():
                if action not in process:
                    heapq.heappush(due, (now + agent.report_offset(interval), index, action, interval))
        for action, interval in process.items():
            heapq.heappush(due, (now + interval, PROCESS, action, interval))
        try:
            while not self.stop.is_set() and due:
                now = loop.time()
                while due and due[0][0] <= now:
                    at, index, action, interval = heapq.heappop(due)
                    self._start(index, action, interval)
                    # fixed rate, as the agent's own loop: a late report does not stretch the interval (and one
                    # missed altogether is not made up for)
                    at += interval
                    heapq.heappush(due, (at if at > now else now + interval, index, action, interval))
                wait = max(due[0][0] - loop.time(), TICK) if due else None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), timeout=wait)
        finally:
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._process_report("inventories")  # what was handed since the last flush

    def _process_actions(self) -> dict[str, float]:
        """The reports made once for the whole process, with their intervals."""
        if not self.agents:
            return {}
        intervals = self.agents[0].report_intervals()
        actions = {"summary": intervals["summary"]}
        if self.group is not None:
            actions["heartbeat"] = intervals["heartbeat"]
            actions["inventories"] = FLUSH_SECONDS
        return actions

    async def _process_report(self, action: str) -> None:
        try:
            if action == "summary":
                process_summary(self.agents)
            elif action == "inventories":
                if self.inventories is not None:
                    await self.inventories.flush(self.agents[0].js, self.agents[0].config.source)
            elif self.group is not None:
                await group_heartbeat_once(self.agents, self.group)
        except Exception as error:  # a lost report must not stop the others
            log.warning(f"node_agent.{action}_failed", group=self.group, error=f"{type(error).__name__}: {error}")

    def _start(self, index: int, action: str, interval: float) -> None:
        key = (index, action)
        if key in self._running:
            return
        if index == PROCESS:
            report = self._process_report(action)
        else:
            agent = self.agents[index]
            if not agent.started.is_set():
                return
            report = agent.report(action, interval)
        self._running.add(key)
        self.started += 1
        task = asyncio.create_task(report)
        self._tasks.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            self._tasks.discard(finished)
            self._running.discard(key)

        task.add_done_callback(done)
