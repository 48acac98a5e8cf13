"""The `sim` runtime: containers that exist only in memory and use what their load model says (eru.nodeagent.load).

One process can serve hundreds of simulated nodes (one `SimRuntime` each). The clock is injectable, so tests drive
time; with the same seed and the same times every node reports the same usage.

Simulation labels on the workload: `eru.sim.load` (a load model, JSON), `eru.sim.exit_after` (seconds after start
at which the container exits, e.g. `0` for one that crashes at once), `eru.sim.unhealthy` (`true`: its health
command fails; a comma-separated list of images: it fails on those images, an image whose check fails for a
rolling replace), `eru.sim.exit_code` (the code it exits with, default 0). A workload's health check is
modelled over the clock (eru.nodeagent.health.modelled_health).

Logs and exec are modelled (docs/node-agent.md "Logs and exec"): a container's log is its command echoed, one line
(nothing when it has none), followed until it exits; an exec prints its command line and exits 0.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from eru.domain.messages import ContainerSpec
from eru.domain.resources import Allocation
from eru.nodeagent.capacity import NodeCapacity, node_capacity
from eru.nodeagent.engine import engine_name, engine_resources, suppressed_resources
from eru.nodeagent.health import fails_health, modelled_health
from eru.nodeagent.load import (
    EXIT_AFTER_LABEL,
    UNHEALTHY_LABEL,
    AnyLoad,
    Usage,
    apply_limits,
    load_for,
    share_node_cpu,
    usage_at,
)
from eru_node_agent.runtime.base import (
    AppliedResources,
    ContainerMissing,
    ContainerUsage,
    NodeUsage,
    Output,
    RuntimeContainer,
    RuntimeFailure,
)

SIM_CORES = 16
SIM_MEM_TOTAL = 64 * 1024**3
EXIT_CODE_LABEL = "eru.sim.exit_code"
FOLLOW_POLL_SECONDS = 0.05  # how often `logs -f` looks whether a simulated container exited


@dataclass
class SimContainer:
    """One simulated container."""

    container_id: str
    labels: dict[str, str]
    allocation: Allocation
    load: AnyLoad
    node_cores: tuple[str, ...]
    state: str = "created"
    started_at: float | None = None
    exit_after: float | None = None
    unhealthy: bool = False
    # the workload's health check (None: it has none), modelled over the clock (eru.nodeagent.health)
    health_interval: float | None = None
    health_retries: int = 3
    command: tuple[str, ...] = ()
    exit_code: int = 0
    # Derived from the allocation or the state and kept until they change: a sample, a listing and an inventory
    # read every container of the node, so none of them recomputes what did not change (docs/node-agent.md).
    limits: tuple[float, bool, int] | None = field(default=None, repr=False)
    cpu_quota: float | None = None  # the eviction service's squeeze (cores), on top of the allocation
    applied_now: AppliedResources | None = field(default=None, repr=False)
    view: RuntimeContainer | None = field(default=None, repr=False)


class SimRuntime:
    """A simulated node: capacity from settings, usage from load models."""

    kind = "sim"

    def __init__(
        self,
        node: str,
        *,
        seed: int = 0,
        share_base: int = 100,
        memory_fraction: float = 0.8,
        cpu_cores: int | None = None,
        memory: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        default_load: AnyLoad | None = None,
    ) -> None:
        self.node = node
        self.seed = seed
        self._cpu_cores = cpu_cores or SIM_CORES
        self._capacity = node_capacity(
            cores=[str(i) for i in range(self._cpu_cores)],
            mem_total=SIM_MEM_TOTAL,
            share_base=share_base,
            memory_fraction=memory_fraction,
            memory=memory,
        )
        self.clock = clock
        self.default_load = default_load
        self.containers: dict[str, SimContainer] = {}

    async def capacity(self) -> tuple[NodeCapacity, dict[str, str]]:
        """`cpu_cores` (default 16) cores, `memory` or the memory fraction of 64 GiB."""
        return self._capacity, {"engine": "sim", "seed": str(self.seed)}

    def _refresh(self, container: SimContainer) -> None:
        if container.state != "running" or container.exit_after is None or container.started_at is None:
            return
        if self.clock() - container.started_at >= container.exit_after:
            container.state = "exited"

    def _get(self, container_id: str) -> SimContainer:
        container = self.containers.get(container_id)
        if container is None:
            raise ContainerMissing(f"container {container_id} does not exist on this node")
        self._refresh(container)
        return container

    async def create(self, spec: ContainerSpec, labels: Mapping[str, str], node_cores: Sequence[str]) -> str:
        """Create (idempotent for the same id); the load model and the engine mapping are checked as for docker."""
        engine_resources(spec.allocation, node_cores)  # the same validation as a real engine gets
        if spec.container_id in self.containers:
            return engine_name(spec.container_id)
        workload = spec.workload
        exit_after = workload.labels.get(EXIT_AFTER_LABEL)
        try:
            exit_seconds = float(exit_after) if exit_after is not None else None
        except ValueError:
            raise RuntimeFailure(f"label {EXIT_AFTER_LABEL}: {exit_after!r} is not a number of seconds") from None
        code = workload.labels.get(EXIT_CODE_LABEL, "0")
        if not code.lstrip("-").isdigit():
            raise RuntimeFailure(f"label {EXIT_CODE_LABEL}: {code!r} is not an exit code")
        self.containers[spec.container_id] = SimContainer(
            container_id=spec.container_id,
            labels=dict(labels),
            allocation=spec.allocation,
            load=load_for(workload.labels, workload.resources, self.default_load),
            node_cores=tuple(node_cores),
            exit_after=exit_seconds,
            unhealthy=fails_health(workload.labels.get(UNHEALTHY_LABEL), workload.image),
            health_interval=workload.health_interval_seconds if workload.health_command else None,
            health_retries=workload.health_retries,
            command=tuple(workload.command),
            exit_code=int(code),
        )
        return engine_name(spec.container_id)

    async def start(self, container_id: str) -> None:
        """Start (a running container stays as it is; an exited one starts again)."""
        container = self._get(container_id)
        if container.state in ("created", "exited"):
            container.state = "running"
            container.started_at = self.clock()

    async def stop(self, container_id: str, timeout_seconds: float) -> None:
        """Stop at once."""
        container = self._get(container_id)
        if container.state in ("running", "paused"):
            container.state = "exited"

    async def remove(self, container_id: str) -> None:
        """Forget the container."""
        self.containers.pop(container_id, None)

    async def pause(self, container_id: str) -> None:
        """Pause a running container."""
        container = self._get(container_id)
        if container.state == "running":
            container.state = "paused"
        elif container.state != "paused":
            raise RuntimeFailure(f"container {container_id} is {container.state}, not running")

    async def unpause(self, container_id: str) -> None:
        """Resume a paused container."""
        container = self._get(container_id)
        if container.state == "paused":
            container.state = "running"

    async def update(
        self, container_id: str, allocation: Allocation, node_cores: Sequence[str], *, cpu_quota: float | None = None
    ) -> None:
        """Change the allocation (and the eviction service's squeeze) in place."""
        container = self._get(container_id)
        engine_resources(allocation, node_cores)
        container.allocation = allocation
        container.cpu_quota = cpu_quota
        container.limits = container.applied_now = None

    async def inspect(self, container_id: str) -> RuntimeContainer | None:
        """The container or None."""
        container = self.containers.get(container_id)
        if container is None:
            return None
        self._refresh(container)
        return self._view(container)

    def _health(self, container: SimContainer) -> str | None:
        if container.health_interval is None or container.state != "running" or container.started_at is None:
            return None
        running = self.clock() - container.started_at
        return modelled_health(running, container.health_interval, container.health_retries, container.unhealthy)

    def _view(self, container: SimContainer) -> RuntimeContainer:
        started_at = repr(container.started_at) if container.started_at is not None else ""
        view = container.view
        health = self._health(container)
        if view is None or view.state != container.state or view.started_at != started_at or view.health != health:
            name = engine_name(container.container_id)
            view = container.view = RuntimeContainer(
                engine_id=name,
                name=name,
                labels=container.labels,
                state=container.state,
                started_at=started_at,
                exit_code=container.exit_code if container.state == "exited" else None,
                health=health,
            )
        return view

    async def list(self) -> list[RuntimeContainer]:
        """Every simulated container of this node."""
        for container in self.containers.values():
            self._refresh(container)
        return [self._view(container) for container in self.containers.values()]

    async def applied(self, container_id: str) -> AppliedResources | None:
        """The engine settings its allocation maps to (a simulated engine applies exactly what it was given)."""
        container = self.containers.get(container_id)
        if container is None:
            return None
        if container.applied_now is None:
            wanted = suppressed_resources(container.allocation, container.node_cores, container.cpu_quota)
            container.applied_now = AppliedResources(
                wanted.cpuset_cpus, wanted.cpu_shares, wanted.cpu_quota, wanted.memory
            )
        return container.applied_now

    async def health_check(self, container_id: str, command: Sequence[str], timeout_seconds: float) -> bool:
        """Healthy unless the workload is labelled unhealthy."""
        container = self._get(container_id)
        return container.state == "running" and not container.unhealthy

    def _limits(self, container: SimContainer) -> tuple[float, bool, int]:
        """(CPU cap in cores, whether it is a quota, memory cap in bytes or 0) from the allocation."""
        if container.limits is None:
            allocation = container.allocation
            bound = sum(1 for pieces in allocation.cpu_map.values() if pieces > 0)
            memory_cap = 0 if allocation.memory_soft else (allocation.memory_limit or allocation.memory)
            if bound:
                container.limits = (float(bound), False, memory_cap)
            elif allocation.cpu_limit > 0:
                container.limits = (allocation.cpu_limit, True, memory_cap)
            else:
                container.limits = (float(self._cpu_cores), False, memory_cap)
            if container.cpu_quota is not None:  # the squeeze: a quota, never above the container's own cap
                container.limits = (min(container.limits[0], max(0.01, container.cpu_quota)), True, memory_cap)
        return container.limits

    async def usage(self, container_ids: Sequence[str], interval_seconds: float) -> NodeUsage:
        """What every running container's load model says now, capped by its limits and by the node's cores."""
        now = self.clock()
        demands: dict[str, float] = {}
        limited: dict[str, ContainerUsage] = {}
        for container_id in container_ids:
            container = self.containers.get(container_id)
            if container is None:
                continue
            self._refresh(container)
            if container.state not in ("running", "paused") or container.started_at is None:
                limited[container_id] = ContainerUsage(0.0, 0)
                continue
            demand = usage_at(container.load, now - container.started_at, seed=self.seed, container_id=container_id)
            if container.state == "paused":  # frozen: no CPU, memory kept
                demand = Usage(0.0, demand.memory)
            cap, quota, memory_cap = self._limits(container)
            result = apply_limits(
                demand, cpu_cap=cap, memory_cap=memory_cap, interval_seconds=interval_seconds if quota else 0.0
            )
            demands[container_id] = result.cpu
            limited[container_id] = ContainerUsage(
                result.cpu, result.memory, result.throttled_periods, result.throttled_seconds
            )
        if sum(demands.values()) > self._cpu_cores:  # only then does sharing change anything (share_node_cpu)
            shared = share_node_cpu(demands, float(self._cpu_cores))
            containers = {
                cid: ContainerUsage(
                    shared.get(cid, use.cpu_used), use.memory_used, use.throttled_periods, use.throttled_seconds
                )
                for cid, use in limited.items()
            }
        else:
            containers = limited
        return NodeUsage(
            cpu_used=sum(u.cpu_used for u in containers.values()),
            memory_used=sum(u.memory_used for u in containers.values()),
            memory_total=max(SIM_MEM_TOTAL, self._capacity.memory),
            cpu_capacity=float(self._cpu_cores),
            containers=containers,
        )

    async def logs(self, container_id: str, output: Output, *, follow: bool, tail: int | None) -> int | None:
        """The command echoed as the container's one line of log; with `follow`, until the container exits."""
        container = self._get(container_id)
        if container.command and tail != 0:
            await output("stdout", " ".join(container.command) + "\n")
        while follow and container.state in ("running", "paused", "created"):
            await asyncio.sleep(FOLLOW_POLL_SECONDS)
            if self.containers.get(container_id) is not container:
                return None  # removed meanwhile
            self._refresh(container)
        return container.exit_code if container.state == "exited" else None

    async def exec(self, container_id: str, command: Sequence[str], output: Output) -> int:
        """A fake run: the command line printed, exit code 0 (a container that is not running refuses it)."""
        container = self._get(container_id)
        if container.state != "running":
            raise RuntimeFailure(f"container {container_id} is {container.state}, not running")
        await output("stdout", " ".join(command) + "\n")
        return 0

    async def close(self) -> None:
        """Nothing to release."""
