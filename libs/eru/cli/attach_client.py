"""The client side of the logs and exec streams (docs/node-agent.md "Logs and exec"): subscribe to the session's
stream subject, ask the allocator (which checks the caller and finds the node), then put the chunks back in order
until the `end`, answering the agent's pings meanwhile."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from eru.cli.bus_client import current_tenant, operation_subject

T = TypeVar("T")

if TYPE_CHECKING:
    from nats.aio.client import Client

OutputSink = Callable[[str, str], None]


@dataclass
class Session:
    """A finished stream: where it ran, how it ended, how many chunks were lost, and (when collected) its output."""

    container_id: str
    node: str = ""
    exit_code: int | None = None
    error: str | None = None
    lost: int = 0
    output: list[tuple[str, str]] = field(default_factory=list)


def write_through(stream: str, text: str) -> None:
    """Print output as it comes, stdout to stdout and stderr to stderr (raw text: never markup, never wrapped)."""
    target = sys.stderr if stream == "stderr" else sys.stdout
    target.write(text)
    target.flush()


async def attach(
    nc: Client,
    container_id: str,
    action: str,
    *,
    sink: OutputSink | None = None,
    follow: bool = False,
    tail: int | None = None,
    command: list[str] | None = None,
    timeout: float = 10.0,  # noqa: ASYNC109 - for the allocator's answer; the stream itself runs to its end
) -> Session:
    """Stream one container's logs (`action` logs) or one command's output (`exec`) to `sink` (collected in the
    session when None) and return how it ended. Raises the allocator's or the agent's refusal as an `EruError`."""
    from eru.bus import new_id, request
    from eru.bus.codec import decode
    from eru.bus.subjects import attach_stream
    from eru.domain.attach import AttachChunk, AttachReply, AttachRequest
    from eru.nodeagent.attach import Ordered

    ask = AttachRequest(
        container_id=container_id, action=action, session=new_id(), follow=follow, tail=tail, command=command or []
    )
    session = Session(container_id)
    ordered: Ordered[tuple[str, str]] = Ordered()
    ended: asyncio.Future[AttachChunk] = asyncio.get_running_loop().create_future()

    def deliver(pieces: list[tuple[str, str]]) -> None:
        for stream, text in pieces:
            if sink is None:
                session.output.append((stream, text))
            else:
                sink(stream, text)

    async def on_chunk(msg: Any) -> None:
        try:
            chunk = decode(msg.data, AttachChunk)
        except Exception:  # not a chunk: nothing of this session
            return
        if chunk.kind == "ping":
            if msg.reply:
                await nc.publish(msg.reply, b"")
        elif chunk.kind == "out":
            deliver(ordered.take(chunk.seq, (chunk.stream, chunk.data)))
        elif not ended.done():
            deliver(ordered.flush(chunk.seq))
            ended.set_result(chunk)

    subscription = await nc.subscribe(attach_stream(current_tenant(), ask.session), cb=on_chunk)
    try:
        await nc.flush()
        reply = await request(nc, operation_subject("attach"), ask, AttachReply, timeout)
        session.node = reply.node
        end = await _until_done(ended)
    finally:
        await subscription.unsubscribe()
    session.exit_code, session.error, session.lost = end.exit_code, end.error, ordered.lost
    return session


async def _until_done(ended: asyncio.Future[T]) -> T:
    """`await ended`, but a Ctrl-C whose cancellation a library lost on the way (Python 3.11's `asyncio.wait_for`
    may hand a cancellation back as a result or a timeout; docs/bus.md "Request/reply") still ends the wait within
    a second: the task is asked every second whether it is being cancelled."""
    while True:
        done, _ = await asyncio.wait({ended}, timeout=1.0)
        if done:
            return ended.result()
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError
