"""The small typed messages the bus tests send, a polling helper, and a counter of a subscription's pull requests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Resources(BaseModel):
    """A nested part, so schema errors have a dotted field path."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpu_request: float = Field(ge=0)
    memory: int = Field(ge=0)


class Job(BaseModel):
    """A test message."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    request: Resources
    tags: list[str] = Field(default_factory=list)


class Reply(BaseModel):
    """A test reply."""

    model_config = ConfigDict(frozen=True)

    status: str = "accepted"
    job: str
    cores: float


async def eventually(condition: Callable[[], bool | Awaitable[bool]], timeout: float = 10.0) -> None:  # noqa: ASYNC109
    """Wait until `condition` holds; fail the test with a clear message after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(0.02)


def count_pull_requests(nc: Any, subscription: Any) -> list[bytes]:
    """The pull requests `nc` sends for a nats-py pull `subscription` from now on (their bodies, in order)."""
    requests: list[bytes] = []
    publish = nc.publish

    async def counting(subject: str, payload: bytes = b"", reply: str = "", headers: Any = None) -> None:
        if subject == subscription._nms:
            requests.append(payload)
        await publish(subject, payload, reply, headers)

    nc.publish = counting
    return requests
