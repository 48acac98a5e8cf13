"""Executing one node command against the runtime; the result is always one `ContainerEvent`.

| command | success | failure |
|---|---|---|
| create | `started` (with the allocation) | `failed` (nothing left behind on the engine) |
| start | `started` | `failed` |
| stop | `stopped` | `failed` |
| restart | `started` (stopped within `stop_timeout_seconds`, then started again) | `failed` |
| dissociate | `dissociated` (the engine keeps it; the agent forgets it for good) | — |
| remove, evict | `removed` (stopped within `stop_timeout_seconds`, then removed) | `failed` |
| pause / unpause | `paused` / `unpaused` | `failed` |
| update | `updated` (new allocation, same container, no restart) | `failed` (the old allocation stays) |
| replace | `replaced` (container_id = the new one) | `failed` for the new one (rolled back) |

A command for a container the node does not have answers `removed` ("does not exist on this node"), except create.

At most `engine_slots` commands work on the engine at once (docs/node-agent.md "Concurrency"): a waiting command takes
the next free slot in the order it asked for one, so the containers of a batch start in request order and each is
reported as it runs. A replace gives its slot back while it waits for the new container to prove healthy.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Sequence

from eru.bus.subjects import token
from eru.domain.messages import ContainerEvent, ContainerSpec, NodeCommand
from eru.domain.resources import Allocation
from eru.errors import InvalidInput
from eru.nodeagent.engine import container_labels, managed_container
from eru_node_agent.config import ENGINE_CONCURRENCY
from eru_node_agent.runtime.base import ContainerMissing, Runtime, RuntimeFailure
from eru_node_agent.state import AgentState, Known

UPDATE_KINDS = frozenset({"update", "suppress"})  # suppress: the eviction service's CPU squeeze, applied in place
SIMPLE_KINDS = frozenset({"start", "stop", "restart", "pause", "unpause", "remove", "evict"})
REPLACE_SETTLE_SECONDS = 1.0  # a replacement must stay up this long (a crash at start is not "healthy")


class CommandExecutor:
    """Runs commands of one node; the caller serialises commands per container and handles idempotency."""

    def __init__(
        self,
        node: str,
        runtime: Runtime,
        state: AgentState,
        node_cores: Sequence[str],
        *,
        stop_timeout_seconds: float = 5.0,
        settle_seconds: float = REPLACE_SETTLE_SECONDS,
        engine_slots: asyncio.Semaphore | None = None,
    ) -> None:
        self.node = node
        self.runtime = runtime
        self.state = state
        self.node_cores = list(node_cores)
        self.stop_timeout_seconds = stop_timeout_seconds
        self.settle_seconds = settle_seconds
        self.engine_slots = engine_slots or asyncio.Semaphore(ENGINE_CONCURRENCY)

    def _event(
        self, command: NodeCommand, kind: str, container_id: str | None = None, **fields: object
    ) -> ContainerEvent:
        cid = container_id or command.container_id
        known = self.state.containers.get(cid)
        deploy_id = fields.pop("deploy_id", None)
        if deploy_id is None and known is not None:
            deploy_id = known.labels.get("eru.deploy_id")
        if deploy_id is None and command.spec is not None:
            deploy_id = command.spec.deploy_id
        return ContainerEvent.model_validate(
            {
                "node": self.node,
                "container_id": cid,
                "deploy_id": deploy_id,
                "command_id": command.command_id,
                "command_kind": command.kind,
                "kind": kind,
                **fields,
            }
        )

    async def execute(self, command: NodeCommand) -> ContainerEvent:
        """Run `command`; `InvalidInput` for a command that cannot mean anything (the caller dead-letters it)."""
        token(command.container_id, "container_id")
        try:
            if command.kind == "replace":  # takes its slot itself: not while the new container settles
                return await self._replace(command)
            async with self.engine_slots:
                return await self._in_slot(command)
        except ContainerMissing as missing:
            event = self._event(command, "removed", reason=missing.reason)
            self.state.containers.pop(command.container_id, None)
            return event
        except RuntimeFailure as failure:
            if command.kind == "replace" and command.replacement is not None:
                return self._event(
                    command,
                    "failed",
                    container_id=command.replacement.container_id,
                    reason=f"replace not done, {command.container_id} unchanged: {failure.reason}",
                    replaced_container_id=command.container_id,
                    deploy_id=command.replacement.deploy_id,
                )
            return self._event(command, "failed", reason=f"{command.kind} failed: {failure.reason}")

    async def _in_slot(self, command: NodeCommand) -> ContainerEvent:
        if command.kind == "create":
            return await self._create(command)
        if command.kind == "suppress":
            return await self._suppress(command)
        if command.kind in UPDATE_KINDS:
            return await self._update(command)
        if command.kind in SIMPLE_KINDS:
            return await self._simple(command)
        if command.kind == "dissociate":
            return await self._dissociate(command)
        raise InvalidInput("kind", f"{command.kind!r} is not a command this agent knows")

    async def _simple(self, command: NodeCommand) -> ContainerEvent:
        cid = command.container_id
        try:
            if command.kind == "start":
                await self.runtime.start(cid)
                self._mark(cid, running=True)
                return self._event(command, "started", allocation=self._allocation(cid))
            if command.kind == "restart":
                await self.runtime.stop(cid, self.stop_timeout_seconds)
                await self.runtime.start(cid)
                self._mark(cid, running=True)
                return self._event(command, "started", allocation=self._allocation(cid), reason=command.reason)
            if command.kind == "stop":
                await self.runtime.stop(cid, self.stop_timeout_seconds)
                self._mark(cid, running=False)
                return self._event(command, "stopped", reason=command.reason)
            if command.kind == "pause":
                await self.runtime.pause(cid)
                return self._event(command, "paused", reason=command.reason)
            if command.kind == "unpause":
                await self.runtime.unpause(cid)
                return self._event(command, "unpaused", reason=command.reason)
            # remove, evict (SIMPLE_KINDS holds nothing else)
            event = self._event(command, "removed", reason=command.reason or command.kind)
            existing = await self.runtime.inspect(cid)
            if existing is not None and existing.state in ("running", "paused") and self.stop_timeout_seconds > 0:
                if existing.state == "paused":
                    await self.runtime.unpause(cid)
                await self.runtime.stop(cid, self.stop_timeout_seconds)
            await self.runtime.remove(cid)
            self.state.containers.pop(cid, None)
            return event
        except ContainerMissing:
            raise
        except RuntimeFailure as failure:
            return self._event(command, "failed", reason=f"{command.kind} failed: {failure.reason}")

    async def _dissociate(self, command: NodeCommand) -> ContainerEvent:
        """Stop managing the container without touching it on the engine: no more reports, metrics or inventory
        entries as eru's (docs/cli.md "Dissociate")."""
        cid = command.container_id
        if cid not in self.state.dissociated and await self.runtime.inspect(cid) is None:
            raise ContainerMissing(f"container {cid} does not exist on this node")
        event = self._event(command, "dissociated", reason=command.reason or "dissociated: left on the engine")
        self.state.dissociated.add(cid)
        self.state.containers.pop(cid, None)
        return event

    def _mark(self, container_id: str, *, running: bool) -> None:
        known = self.state.containers.get(container_id)
        if known is not None and known.running != running:
            self.state.containers[container_id] = dataclasses.replace(known, running=running)

    def _allocation(self, container_id: str) -> Allocation | None:
        known = self.state.containers.get(container_id)
        return known.allocation if known is not None else None

    async def _start_new(self, spec: ContainerSpec) -> str | None:
        """Create and start `spec`; None when it runs, else why not (and nothing is left on the engine)."""
        labels = container_labels(spec, self.node)
        try:  # no inspect first: create reuses a container of the same id, start leaves a running one as it is
            await self.runtime.create(spec, labels, self.node_cores)
            await self.runtime.start(spec.container_id)
        except RuntimeFailure as failure:
            with contextlib.suppress(RuntimeFailure):
                await self.runtime.remove(spec.container_id)
            return failure.reason
        self.state.containers[spec.container_id] = Known(labels=labels, allocation=spec.allocation)
        return None

    async def _create(self, command: NodeCommand) -> ContainerEvent:
        spec = command.spec
        if spec is None:
            raise InvalidInput("spec", "a create command needs the container's spec")
        if spec.container_id != command.container_id:
            raise InvalidInput("spec.container_id", f"{spec.container_id!r} differs from {command.container_id!r}")
        problem = await self._start_new(spec)
        if problem is not None:
            return self._event(command, "failed", reason=problem, deploy_id=spec.deploy_id)
        return self._event(command, "started", allocation=spec.allocation, deploy_id=spec.deploy_id)

    async def _suppress(self, command: NodeCommand) -> ContainerEvent:
        """The eviction service's CPU squeeze on top of the container's own allocation (docs/colocation.md
        "Suppression"): its cpuset, shares and memory stay as planned; `cpu_quota` None restores exactly them."""
        cid = command.container_id
        known = self.state.containers.get(cid)
        if known is None:
            found = await self.runtime.inspect(cid)
            managed = managed_container(found.labels) if found is not None else None
            if found is None or managed is None:
                raise ContainerMissing(f"container {cid} does not exist on this node")
            known = Known(labels=dict(found.labels), allocation=managed.allocation)
        try:
            await self.runtime.update(cid, known.allocation, self.node_cores, cpu_quota=command.cpu_quota)
        except ContainerMissing:
            raise
        except RuntimeFailure as failure:
            return self._event(command, "failed", reason=f"suppress refused, previous quota kept: {failure.reason}")
        self.state.containers[cid] = dataclasses.replace(known, cpu_quota=command.cpu_quota)
        return self._event(command, "updated", allocation=known.allocation, reason=command.reason)

    async def _update(self, command: NodeCommand) -> ContainerEvent:
        if command.allocation is None:
            raise InvalidInput("allocation", "an update command needs the new allocation")
        cid = command.container_id
        squeeze = known.cpu_quota if (known := self.state.containers.get(cid)) is not None else None
        try:  # a realloc while suppressed keeps the squeeze, within the new allocation's own limit
            await self.runtime.update(cid, command.allocation, self.node_cores, cpu_quota=squeeze)
        except ContainerMissing:
            raise
        except RuntimeFailure as failure:
            return self._event(command, "failed", reason=f"update refused, previous allocation kept: {failure.reason}")
        known = self.state.containers.get(cid)
        if known is None:
            found = await self.runtime.inspect(cid)
            if found is None:
                raise ContainerMissing(f"container {cid} does not exist on this node")
            known = Known(labels=dict(found.labels), allocation=command.allocation)
        self.state.containers[cid] = dataclasses.replace(known, allocation=command.allocation)
        return self._event(command, "updated", allocation=command.allocation, reason=command.reason)

    async def _replace(self, command: NodeCommand) -> ContainerEvent:
        replacement = command.replacement
        if replacement is None:
            raise InvalidInput("replacement", "a replace command needs the new container's spec")
        token(replacement.container_id, "replacement.container_id")
        if replacement.container_id == command.container_id:
            raise InvalidInput("replacement.container_id", "must differ from the container it replaces")
        old_id, new_id = command.container_id, replacement.container_id
        async with self.engine_slots:
            old = await self.runtime.inspect(old_id)
            if old is None:
                raise ContainerMissing(f"container {old_id} does not exist on this node")
            known = self.state.containers.get(old_id)
            managed = managed_container(old.labels)
            allocation = known.allocation if known else (managed.allocation if managed else replacement.allocation)
            spec = replacement.model_copy(update={"allocation": allocation})
            # A replacement already on the engine means an earlier attempt (before a crash) paused the old one itself.
            was_paused = old.state == "paused" and await self.runtime.inspect(new_id) is None
            if not was_paused:
                await self.runtime.pause(old_id)
            problem = await self._start_new(spec)
        if problem is None:
            problem = await self._wait_healthy(spec, command.health_timeout_seconds)
        async with self.engine_slots:
            if problem is not None:
                await self.runtime.remove(new_id)
                self.state.containers.pop(new_id, None)
                if not was_paused:
                    await self.runtime.unpause(old_id)
                return self._event(
                    command,
                    "failed",
                    container_id=new_id,
                    reason=f"replace rolled back, {old_id} runs on: {problem}",
                    replaced_container_id=old_id,
                    deploy_id=spec.deploy_id,
                )
            await self.runtime.remove(old_id)
        self.state.containers.pop(old_id, None)
        return self._event(
            command,
            "replaced",
            container_id=new_id,
            allocation=allocation,
            replaced_container_id=old_id,
            deploy_id=spec.deploy_id,
        )

    async def _wait_healthy(self, spec: ContainerSpec, timeout_seconds: float) -> str | None:
        """None once the new container has run for the settle time and passed its health command, else why not."""
        deadline = time.monotonic() + timeout_seconds
        settle_until = time.monotonic() + min(self.settle_seconds, timeout_seconds / 2)
        command = spec.workload.health_command
        while True:
            current = await self.runtime.inspect(spec.container_id)
            if current is None:
                return "the new container disappeared"
            if not current.running:
                code = f" with code {current.exit_code}" if current.exit_code is not None else ""
                return f"the new container is {current.state}{code}"
            now = time.monotonic()
            if now >= settle_until:
                remaining = max(0.1, deadline - now)
                if not command or await self.runtime.health_check(spec.container_id, command, remaining):
                    return None
            if time.monotonic() >= deadline:
                what = "its health check did not pass" if command else "it did not stay up"
                return f"the new container was not healthy within {timeout_seconds}s: {what}"
            await asyncio.sleep(0.2)
