"""A request asked to stop stops, even when nats-py hands the cancellation back as a timeout (eru.bus.requests).

nats-py's `Subscription.next_msg` waits in a task of its own under `asyncio.wait_for`; in Python 3.11 a cancellation
that meets that wait's timeout may come back to the caller as the timeout. `request` polls every 0.1 s, so such a
meeting is likely over a long wait: once in a full test run, `eru run`'s Ctrl-C arrived while it waited for the
attach reply, was lost, and the CLI followed the container's logs until the test gave up
(tests/integration/workloads/test_attach_sim.py::test_ctrl_c_on_run_removes_its_containers_and_exits_130)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.errors import TimeoutError as NatsTimeoutError

from eru.bus.requests import request
from eru.domain.messages import ErrorReply, QueryRequest


class CancelAsTimeout:
    """A subscription whose wait answers a cancellation with nats' timeout, as the race above does."""

    async def next_msg(self, timeout: float) -> Any:  # noqa: ASYNC109 - nats-py's signature
        try:
            await asyncio.sleep(timeout)
        except asyncio.CancelledError:
            raise NatsTimeoutError from None
        raise NatsTimeoutError

    async def unsubscribe(self) -> None:
        return None


class Bus:
    """The parts of a nats-py client `request` uses; nobody ever answers."""

    def __init__(self) -> None:
        self.violations: list[Any] = []

    def new_inbox(self) -> str:
        return "_INBOX.test"

    async def subscribe(self, _subject: str) -> CancelAsTimeout:
        return CancelAsTimeout()

    async def publish(self, *_args: Any, **_kwargs: Any) -> None:
        return None

    async def flush(self, timeout: float) -> None:  # noqa: ASYNC109 - nats-py's signature
        return None


async def test_a_cancelled_request_raises_cancelled_not_waits_for_its_deadline() -> None:
    asked = asyncio.create_task(
        request(Bus(), "eru.allocator.query", QueryRequest(what="pods"), ErrorReply, timeout=60)  # type: ignore[arg-type]
    )
    await asyncio.sleep(0.25)  # a few of its 0.1 s polls
    asked.cancel()
    done, _ = await asyncio.wait([asked], timeout=5)
    assert done, "the request went on after it was cancelled"
    with pytest.raises(asyncio.CancelledError):
        asked.result()
