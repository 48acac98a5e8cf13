"""Starting a node's agent among many: bounded, retried, never fatal to the process (docs/node-agent.md "Many
simulated nodes in one process").

A process of 2,500 sim nodes used to start them all at once: 2,500 consumer creations, registrations and
inventories in flight, one JetStream request timed out, and the exception ended the whole process (the 5,000-node
run, docs/performance.md). Now at most `starts` nodes start at once, and a failed start is logged and tried again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Protocol

import structlog

from eru_node_agent.runtime.base import EngineUnavailable

log = structlog.get_logger()
# waits after the 1st, 2nd … failed start, then the last again
START_RETRY_SECONDS = (2.0, 4.0, 8.0, 15.0, 30.0)
# nodes of one process starting at once: each start is a few JetStream requests (registration, inventory, events)
CONCURRENT_STARTS = 32


class Startable(Protocol):
    """What `start_until_done` needs of an agent."""

    node: str

    async def start(self) -> object:
        """Register the node and rebuild its state."""


def start_retry_seconds(attempt: int) -> float:
    """Seconds to wait after the `attempt`-th failed start (1-based): 2, 4, 8, 15, then 30 s."""
    return START_RETRY_SECONDS[min(max(attempt, 1), len(START_RETRY_SECONDS)) - 1]


async def start_until_done(
    agent: Startable,
    stop: asyncio.Event,
    starts: asyncio.Semaphore | None = None,
    retry_seconds: Callable[[int], float] = start_retry_seconds,
) -> bool:
    """Start `agent`, retrying until it succeeds or stop; False when stopped first. A failed start (the engine
    away, a JetStream request timing out among thousands of nodes starting) is logged and tried again after
    `retry_seconds(attempt)`: it never ends the process, whose other nodes keep serving. At most `starts` at once."""
    attempt = 0
    while not stop.is_set():
        try:
            if starts is None:
                await agent.start()
            else:
                async with starts:
                    await agent.start()
            return True
        except asyncio.CancelledError:
            raise
        except Exception as error:  # anything: one node's failed start must not end the other nodes' process
            attempt += 1
            retry_in = retry_seconds(attempt)
            away = isinstance(error, EngineUnavailable)
            log.warning(
                "node_agent.engine_unavailable" if away else "node_agent.start_failed",
                node=agent.node,
                error=f"{type(error).__name__}: {error}",
                attempt=attempt,
                retry_in=retry_in,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=retry_in)
    return False
