"""Serve the logs and exec streams of this process's nodes (docs/node-agent.md "Logs and exec").

The allocator, once it checked that the caller may act on the container, asks on `eru.node.<node>.attach`; the agent
answers at once (or names why not: an unknown container, too many sessions) and then publishes the output to the
request's stream subject in chunks below the bus's max payload, numbered from 0, and an `end` with the exit code.
Every `PING_SECONDS` it pings the subject (a request); when nobody answers `PINGS_MISSED` times running, the client
is gone and the session stops (an exec's command keeps running to its end in the container, as with `docker exec`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import structlog
from nats.aio.client import Client
from nats.errors import Error as NatsError

from eru.bus import Server, new_envelope, serve
from eru.bus.codec import encode
from eru.bus.publish import message_headers, publish_core
from eru.bus.replies import max_payload
from eru.bus.subjects import node_attach
from eru.domain.attach import AgentAttach, AttachChunk, AttachReply
from eru.errors import EruError, NotFound
from eru.nodeagent.attach import chunk_limit, split_text
from eru_node_agent.agent import NodeAgent
from eru_node_agent.runtime.base import EngineUnavailable, RuntimeFailure

log = structlog.get_logger()
MAX_SESSIONS = 32
"""Sessions one node serves at once; one more is refused `unavailable`."""
PING_SECONDS = 5.0
PING_TIMEOUT_SECONDS = 2.0
PINGS_MISSED = 2
FLUSH_EVERY = 16  # chunks: the client's connection paces a long output instead of the agent's buffer growing


class AttachServer:
    """One responder per node on `eru.node.<node>.attach`, and the sessions it streams."""

    def __init__(self, nc: Client, agents: Sequence[NodeAgent], source: str) -> None:
        self.nc = nc
        self.agents = {agent.node: agent for agent in agents}
        self.source = source
        self.servers: list[Server] = []
        self.sessions: dict[str, set[asyncio.Task[None]]] = {node: set() for node in self.agents}

    async def start(self) -> None:
        """Answer every node's attach requests (a queue group per node: replicas of an agent share its requests); the
        nodes' subscriptions start together (a sim process serves hundreds of nodes, each a round trip to settle)."""

        async def one(node: str) -> Server:
            subject = node_attach(node)
            return await serve(
                self.nc, subject, AgentAttach, self._handler(node), queue=f"node-agent-{node}", source=self.source
            )

        self.servers = list(await asyncio.gather(*(one(node) for node in self.agents)))

    async def stop(self) -> None:
        """Stop answering and end every session."""
        for server in self.servers:
            await server.stop()
        tasks = [task for tasks in self.sessions.values() for task in tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _handler(self, node: str) -> Any:
        async def accept(request: AgentAttach, _envelope: Any) -> AttachReply:
            agent = self.agents[node]
            if request.container_id not in agent.state.containers:
                raise NotFound("container_id", f"{request.container_id!r} is not on node {node}")
            if request.action == "exec":
                current = await agent.runtime.inspect(request.container_id)
                if current is None:
                    raise NotFound("container_id", f"{request.container_id!r} is not on node {node}")
                if not current.running:
                    raise EruError(
                        f"container_id: {request.container_id!r} is {current.state}, not running: exec needs a "
                        "running container",
                        code="not_running",
                        field="container_id",
                    )
            running = self.sessions[node]
            if len(running) >= MAX_SESSIONS:
                raise EruError(
                    f"node {node} already streams {len(running)} sessions (at most {MAX_SESSIONS}); try again later",
                    code="unavailable",
                )
            task = asyncio.create_task(self._session(agent, request), name=f"attach-{request.session}")
            running.add(task)
            task.add_done_callback(running.discard)
            return AttachReply(
                container_id=request.container_id, node=node, session=request.session, subject=request.subject
            )

        return accept

    async def _session(self, agent: NodeAgent, request: AgentAttach) -> None:
        """Stream one session to its end, or until its client is gone."""
        envelope = new_envelope("eru.attach", self.source)
        limit = chunk_limit(max_payload(self.nc))
        sent = 0

        async def output(stream: str, text: str) -> None:
            nonlocal sent
            for piece in split_text(text, limit):
                chunk = AttachChunk(session=request.session, kind="out", seq=sent, stream=stream, data=piece)
                await publish_core(self.nc, request.subject, chunk, envelope)
                sent += 1
                if sent % FLUSH_EVERY == 0:
                    await self.nc.flush()

        async def work() -> int | None:
            if request.action == "exec":
                return await agent.runtime.exec(request.container_id, request.command, output)
            return await agent.runtime.logs(request.container_id, output, follow=request.follow, tail=request.tail)

        running = asyncio.create_task(work())
        watching = asyncio.create_task(self._watch(request))
        try:
            await asyncio.wait({running, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watching.cancel()
            if not running.done():
                running.cancel()
        if watching.done() and not running.done():
            log.info("node_agent.attach_gone", node=agent.node, session=request.session)
            with contextlib.suppress(asyncio.CancelledError):
                await running
            return
        exit_code: int | None = None
        error: str | None = None
        try:
            exit_code = running.result()
        except (RuntimeFailure, EngineUnavailable) as failure:
            error = str(failure)
        except Exception as failure:  # the stream broke: the client learns why instead of waiting
            log.exception("node_agent.attach_failed", node=agent.node, session=request.session)
            error = f"{type(failure).__name__}: {failure}"
        end = AttachChunk(session=request.session, kind="end", seq=sent, exit_code=exit_code, error=error)
        with contextlib.suppress(NatsError, OSError):
            await publish_core(self.nc, request.subject, end, envelope)
            await self.nc.flush()

    async def _watch(self, request: AgentAttach) -> None:
        """Return once the client stopped answering pings on its stream subject."""
        ping = encode(AttachChunk(session=request.session, kind="ping"))
        headers = message_headers(new_envelope("eru.attach.ping", self.source))
        missed = 0
        while missed < PINGS_MISSED:
            await asyncio.sleep(PING_SECONDS)
            try:
                await self.nc.request(request.subject, ping, timeout=PING_TIMEOUT_SECONDS, headers=headers)
            except (NatsError, TimeoutError):  # no responders, or no answer in time
                missed += 1
            else:
                missed = 0
