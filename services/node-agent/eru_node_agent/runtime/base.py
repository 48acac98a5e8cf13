"""The one interface both runtimes implement (`docker`, `sim`), and the errors they raise.

Containers are addressed by their eru container id; the runtime maps it to whatever the engine uses. Every method
is idempotent where the engine allows it (stopping a stopped container, removing a missing one are no-ops).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from eru.domain.messages import ContainerSpec
from eru.domain.resources import Allocation
from eru.nodeagent.capacity import NodeCapacity

Output = Callable[[str, str], Awaitable[None]]
"""Where a container's output goes as it comes: `output(stream, text)`, stream `stdout` or `stderr`."""


class RuntimeFailure(Exception):
    """A per-container failure the engine reported (missing image, bad configuration, unknown container): reported
    as an event, never retried."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ContainerMissing(RuntimeFailure):
    """The container does not exist on the node."""


class EngineUnavailable(Exception):
    """The engine did not answer: the command is retried later."""


@dataclass(frozen=True)
class RuntimeContainer:
    """A container as the engine sees it."""

    engine_id: str
    name: str
    labels: Mapping[str, str]
    state: str  # created | running | paused | restarting | exited | dead | removing
    started_at: str = ""
    exit_code: int | None = None
    # its health check's state: starting | healthy | unhealthy, None without one (docs/node-agent.md "Health and node
    # TTL")
    health: str | None = None

    @property
    def running(self) -> bool:
        """True while its processes run (paused counts as not running)."""
        return self.state == "running"


@dataclass(frozen=True)
class AppliedResources:
    """What the engine applies to a container now (Docker's HostConfig names; quota 0 or -1 = none, memory 0 =
    none): what the node's inventory reports, for the reconciler to compare with the ledger."""

    cpuset: str
    cpu_shares: int
    cpu_quota: int
    memory: int


@dataclass(frozen=True)
class ContainerUsage:
    """A container's usage over the last metrics interval."""

    cpu_used: float
    memory_used: int
    throttled_periods: int = 0
    throttled_seconds: float = 0.0


@dataclass(frozen=True)
class NodeUsage:
    """A node's usage over the last metrics interval, with its containers' (by eru container id)."""

    cpu_used: float
    memory_used: int
    memory_total: int
    cpu_capacity: float
    containers: dict[str, ContainerUsage] = field(default_factory=dict)


class Runtime(Protocol):
    """What the node agent needs from a container engine."""

    kind: str

    async def capacity(self) -> tuple[NodeCapacity, dict[str, str]]:
        """The node's capacity and descriptive labels (engine version, cgroup version …)."""
        ...

    async def create(self, spec: ContainerSpec, labels: Mapping[str, str], node_cores: Sequence[str]) -> str:
        """Create (not start) a container with exactly its planned allocation; returns the engine id."""
        ...

    async def start(self, container_id: str) -> None:
        """Start (idempotent)."""
        ...

    async def stop(self, container_id: str, timeout_seconds: float) -> None:
        """Stop, killing after the timeout (idempotent)."""
        ...

    async def remove(self, container_id: str) -> None:
        """Kill and remove (a missing container is not an error)."""
        ...

    async def pause(self, container_id: str) -> None:
        """Freeze its processes."""
        ...

    async def unpause(self, container_id: str) -> None:
        """Thaw its processes."""
        ...

    async def update(
        self, container_id: str, allocation: Allocation, node_cores: Sequence[str], *, cpu_quota: float | None = None
    ) -> None:
        """Change its resources in place, without a restart; `cpu_quota` (cores) is the eviction service's squeeze on
        top of the allocation (`eru.nodeagent.engine.suppressed_resources`)."""
        ...

    async def inspect(self, container_id: str) -> RuntimeContainer | None:
        """The container, or None when it does not exist."""
        ...

    async def list(self) -> list[RuntimeContainer]:
        """Every container of the engine (eru's and any other)."""
        ...

    async def applied(self, container_id: str) -> AppliedResources | None:
        """The resources the engine applies to the container now, or None when it does not exist."""
        ...

    async def health_check(self, container_id: str, command: Sequence[str], timeout_seconds: float) -> bool:
        """Run the workload's health command inside the container; True when it exits 0 in time."""
        ...

    async def usage(self, container_ids: Sequence[str], interval_seconds: float) -> NodeUsage:
        """Usage since the previous call (the first call may report 0 CPU)."""
        ...

    async def logs(self, container_id: str, output: Output, *, follow: bool, tail: int | None) -> int | None:
        """Send the container's own stdout/stderr to `output` (the last `tail` lines, all when None), with `follow`
        until the container stops; returns its exit code when it is not running at the end, else None."""
        ...

    async def exec(self, container_id: str, command: Sequence[str], output: Output) -> int:
        """Run `command` inside the running container, its output to `output`; returns its exit code."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
