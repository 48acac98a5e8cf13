"""How a planned container maps onto a container engine (docs/planning.md, docs/node-agent.md): pure, no I/O.

* CPU-prime (the allocation has cores): cpuset = every core of the plan; CPU shares = 1024 × f / share_base where f
  is the pieces of the one fragment core (docs/planning.md, after Eru's resource model: "1.7 CPU = one whole core + a
  fragment core with shares 70 × a constant"; shares only matter where the container competes, i.e. on the fragment
  core); no CFS quota.
* Memory-prime (no cores): cpuset = every core of the node, CFS quota = cpu_limit × period (none when the limit is 0).
* Memory: the amount is `memory_limit` when set, else the planned `memory` (memory is never oversold, so a container
  must not grow past what the node reserved for it). A hard limit (`Memory`, swap off), or with `memory_soft` a
  reservation only (`MemoryReservation`, the cgroup soft limit).
* Labels carry everything needed to rebuild the agent's state and report metrics without any other record.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from eru.domain.messages import ContainerSpec, Workload
from eru.domain.resources import Allocation
from eru.errors import InvalidInput

CPU_PERIOD_US = 100_000
MIN_CPU_QUOTA_US = 1_000  # the kernel refuses a CFS quota below 1 ms
SHARES_PER_CORE = 1024
MIN_CPU_SHARES = 2
NO_QUOTA = -1

LABEL_PREFIX = "eru."
L_MANAGED = "eru.managed"
L_NODE = "eru.node"
L_CONTAINER = "eru.container_id"
L_DEPLOY = "eru.deploy_id"
L_WORKLOAD = "eru.workload"
L_CLASS = "eru.class"
L_PRIORITY = "eru.priority"
L_TENANT = "eru.tenant"
L_CPU_BIND = "eru.cpu_bind"
L_CPU_REQUEST = "eru.cpu_request"
L_CPU_LIMIT = "eru.cpu_limit"
L_MEMORY_REQUEST = "eru.memory_request"
L_MEMORY_LIMIT = "eru.memory_limit"
L_MEMORY_SOFT = "eru.memory_soft"
L_ALLOCATION = "eru.allocation"
L_HEALTH = "eru.health_command"
# Eviction budgets and kept batch workloads (docs/colocation.md): desired count, earlier evictions, the budget.
L_DESIRED = "eru.desired"
L_EVICTIONS = "eru.evictions"
L_BUDGET = "eru.eviction_budget"
RESERVED_LABELS = frozenset(
    {
        L_MANAGED,
        L_NODE,
        L_CONTAINER,
        L_DEPLOY,
        L_WORKLOAD,
        L_CLASS,
        L_PRIORITY,
        L_TENANT,
        L_CPU_BIND,
        L_CPU_REQUEST,
        L_CPU_LIMIT,
        L_MEMORY_REQUEST,
        L_MEMORY_LIMIT,
        L_MEMORY_SOFT,
        L_ALLOCATION,
        L_HEALTH,
        L_DESIRED,
        L_EVICTIONS,
        L_BUDGET,
    }
)
ENGINE_NAME_PREFIX = "eru-"


def _core_key(core: str) -> tuple[int, int | str]:
    return (0, int(core)) if core.isdigit() else (1, core)


def sorted_cores(cores: Iterable[str]) -> list[str]:
    """Core ids in numeric order when they are integers (`2` before `10`), others after them by name."""
    return sorted(cores, key=_core_key)


def format_cpuset(cores: Iterable[str]) -> str:
    """A cpuset string, consecutive integer ids collapsed into ranges: `["0","1","2","5"]` → `0-2,5`."""
    ordered = sorted_cores(set(cores))
    parts: list[str] = []
    run: list[int] = []
    for core in ordered:
        if not core.isdigit():
            raise InvalidInput("cpu_map", f"core id {core!r} is not an integer, the engine cannot pin it")
        value = int(core)
        if run and value == run[-1] + 1:
            run.append(value)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [value]
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)


def parse_cpuset(text: str) -> set[str]:
    """The core ids of a cpuset / cpulist string (`0-2,5` → {"0","1","2","5"}); `InvalidInput` when malformed."""
    cores: set[str] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise InvalidInput("cpuset", f"{text!r} is not a cpu list")
        end = int(high) if high else int(low)
        if end < int(low):
            raise InvalidInput("cpuset", f"{text!r} has a descending range {part!r}")
        cores.update(str(core) for core in range(int(low), end + 1))
    return cores


@dataclass(frozen=True)
class EngineResources:
    """The engine-level resource settings of one container (Docker's HostConfig names)."""

    cpuset_cpus: str
    cpuset_mems: str
    cpu_shares: int
    cpu_period: int
    cpu_quota: int
    memory: int
    memory_reservation: int

    def host_config(self) -> dict[str, Any]:
        """The resource part of a create request's HostConfig."""
        config: dict[str, Any] = {
            "CpusetCpus": self.cpuset_cpus,
            "CpuShares": self.cpu_shares,
            "CpuPeriod": self.cpu_period,
            "CpuQuota": self.cpu_quota if self.cpu_quota > 0 else 0,
            "Memory": self.memory,
            "MemorySwap": self.memory if self.memory > 0 else 0,
            "MemoryReservation": self.memory_reservation,
        }
        if self.cpuset_mems:
            config["CpusetMems"] = self.cpuset_mems
        return config

    def update_body(self) -> dict[str, Any]:
        """The body of an in-place update (Docker `POST /containers/{id}/update`).

        The engine reads 0 as "leave unchanged", so a quota is removed with -1; a hard memory limit cannot be lifted in
        place (a soft allocation then only sets the reservation).
        """
        body: dict[str, Any] = {
            "CpusetCpus": self.cpuset_cpus,
            "CpuShares": self.cpu_shares,
            "CpuPeriod": self.cpu_period,
            "CpuQuota": self.cpu_quota,
            "MemoryReservation": self.memory_reservation,
        }
        if self.cpuset_mems:
            body["CpusetMems"] = self.cpuset_mems
        if self.memory > 0:
            body["Memory"] = self.memory
            body["MemorySwap"] = self.memory
        return body


def fragment_of(allocation: Allocation) -> tuple[list[str], str | None, int]:
    """(whole cores, fragment core or None, fragment pieces) of a CPU-prime allocation; `InvalidInput` if malformed."""
    whole: list[str] = []
    fragments: list[tuple[str, int]] = []
    for core, pieces in allocation.cpu_map.items():
        if pieces < 0 or pieces > allocation.share_base:
            raise InvalidInput(
                f"allocation.cpu_map.{core}", f"{pieces} pieces, expected 1..{allocation.share_base} (share_base)"
            )
        if pieces == allocation.share_base:
            whole.append(core)
        elif pieces > 0:
            fragments.append((core, pieces))
    if len(fragments) > 1:
        cores = ", ".join(core for core, _ in sorted(fragments))
        raise InvalidInput("allocation.cpu_map", f"at most one fragment core per container, got {cores}")
    if fragments:
        return sorted_cores(whole), fragments[0][0], fragments[0][1]
    return sorted_cores(whole), None, 0


def engine_resources(allocation: Allocation, node_cores: Sequence[str]) -> EngineResources:
    """The engine settings that give a container exactly its planned allocation (see the module docstring)."""
    bound_cores = [core for core, pieces in allocation.cpu_map.items() if pieces > 0]
    if allocation.cpu_bind and not bound_cores:
        raise InvalidInput("allocation.cpu_map", "a cpu_bind allocation needs at least one core")
    known = node_cores if len(bound_cores) <= 2 else set(node_cores)  # a set of every core costs more than 2 scans
    unknown = [core for core in bound_cores if node_cores and core not in known]
    if unknown:
        raise InvalidInput(
            "allocation.cpu_map", f"cores {sorted_cores(unknown)} are not cores of this node {sorted_cores(known)}"
        )
    if allocation.memory < 0 or allocation.memory_limit < 0:
        raise InvalidInput("allocation.memory", "memory must not be negative")
    if allocation.cpu_limit < 0:
        raise InvalidInput("allocation.cpu_limit", "must not be negative")
    if allocation.numa_node is not None and not allocation.numa_node.isdigit():
        raise InvalidInput("allocation.numa_node", f"{allocation.numa_node!r} is not a NUMA node number")
    if bound_cores:
        _, fragment, pieces = fragment_of(allocation)
        shares = SHARES_PER_CORE
        if fragment is not None:
            shares = max(MIN_CPU_SHARES, SHARES_PER_CORE * pieces // allocation.share_base)
        cpuset = format_cpuset(bound_cores)
        quota = NO_QUOTA
    else:
        shares = SHARES_PER_CORE
        cpuset = format_cpuset(node_cores) if node_cores else ""
        quota = NO_QUOTA
        if allocation.cpu_limit > 0:
            quota = max(MIN_CPU_QUOTA_US, round(allocation.cpu_limit * CPU_PERIOD_US))
    amount = allocation.memory_limit if allocation.memory_limit > 0 else allocation.memory
    return EngineResources(
        cpuset_cpus=cpuset,
        cpuset_mems=allocation.numa_node or "",
        cpu_shares=shares,
        cpu_period=CPU_PERIOD_US,
        cpu_quota=quota,
        memory=0 if allocation.memory_soft else amount,
        memory_reservation=amount,
    )


def bound_core_count(allocation: Allocation) -> int:
    """Cores of the container's cpuset when it is CPU-bound (the cores of its `cpu_map` with pieces), else 0."""
    return sum(1 for pieces in allocation.cpu_map.values() if pieces > 0)


def suppressed_resources(allocation: Allocation, node_cores: Sequence[str], cpu_quota: float | None) -> EngineResources:
    """The engine settings of `allocation` with the eviction service's CPU squeeze on top (docs/colocation.md
    "Suppression"): the cpuset, shares and memory stay exactly the allocation's; the CFS quota is `cpu_quota` cores,
    never above what the container could use unsuppressed (the cores of its cpuset when bound, its own quota when it
    has one). None = no squeeze: exactly `engine_resources(allocation)`, which is how a lift restores a container."""
    own = engine_resources(allocation, node_cores)
    if cpu_quota is None:
        return own
    bound = bound_core_count(allocation)
    quota = round(cpu_quota * CPU_PERIOD_US)
    if bound:
        quota = min(quota, bound * CPU_PERIOD_US)
    elif own.cpu_quota > 0:
        quota = min(quota, own.cpu_quota)
    elif node_cores:
        quota = min(quota, len(node_cores) * CPU_PERIOD_US)
    return replace(own, cpu_quota=max(MIN_CPU_QUOTA_US, quota))


def container_labels(spec: ContainerSpec, node: str) -> dict[str, str]:
    """The labels of a container: the workload's own, plus eru's (which a workload may not set)."""
    return {
        **_workload_labels(spec.workload),
        L_MANAGED: "true",
        L_NODE: node,
        L_CONTAINER: spec.container_id,
        L_DEPLOY: spec.deploy_id,
        L_ALLOCATION: allocation_json(spec.allocation),
        L_DESIRED: str(spec.desired),
        L_EVICTIONS: str(spec.evictions),
    }


_WORKLOAD_LABELS: dict[int, tuple[Workload, dict[str, str]]] = {}  # id → (the frozen workload, its labels)


def _workload_labels(workload: Workload) -> dict[str, str]:
    """The labels every container of `workload` carries; computed once per workload object (the containers of one
    deploy on a node share it) and kept for the last 256 workloads."""
    cached = _WORKLOAD_LABELS.get(id(workload))
    if cached is not None and cached[0] is workload:
        return cached[1]
    taken = sorted(RESERVED_LABELS.intersection(workload.labels))
    if taken:
        raise InvalidInput(f"workload.labels.{taken[0]}", "is reserved for eru's own container labels")
    request = workload.resources
    labels = {
        **workload.labels,
        L_WORKLOAD: workload.name,
        L_CLASS: workload.priority_class,
        L_PRIORITY: str(workload.priority),
        L_TENANT: workload.tenant,
        L_CPU_BIND: str(request.cpu_bind).lower(),
        L_CPU_REQUEST: repr(float(request.cpu_request)),
        L_CPU_LIMIT: repr(float(request.cpu_limit)),
        L_MEMORY_REQUEST: str(request.memory_request),
        L_MEMORY_LIMIT: str(request.memory_limit),
        L_MEMORY_SOFT: str(request.memory_soft).lower(),
        L_HEALTH: json.dumps(workload.health_command),
        L_BUDGET: json.dumps(workload.eviction_budget, sort_keys=True),
    }
    if len(_WORKLOAD_LABELS) >= 256:
        _WORKLOAD_LABELS.clear()
    _WORKLOAD_LABELS[id(workload)] = (workload, labels)
    return labels


def allocation_json(allocation: Allocation) -> str:
    """An allocation as compact, key-sorted JSON (the `eru.allocation` label and the state file)."""
    return json.dumps(allocation.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class ManagedContainer:
    """What the labels of an eru container say about it."""

    container_id: str
    node: str
    deploy_id: str
    workload: str
    priority_class: str
    priority: int
    tenant: str
    cpu_request: float
    cpu_limit: float
    memory_request: int
    memory_limit: int
    allocation: Allocation
    health_command: tuple[str, ...]
    desired: int = 0
    evictions: int = 0
    budget: Mapping[str, object] = field(default_factory=dict)


def managed_container(labels: Mapping[str, str]) -> ManagedContainer | None:
    """The eru identity of a container from its labels; None for a container eru did not create (or whose labels
    are damaged: it is then foreign to every agent)."""
    if labels.get(L_MANAGED) != "true":
        return None
    try:
        allocation = Allocation.model_validate_json(labels[L_ALLOCATION])
        priority_class = labels[L_CLASS]
        if priority_class not in ("prod", "mid", "batch"):
            return None
        health = json.loads(labels.get(L_HEALTH, "[]"))
        return ManagedContainer(
            container_id=labels[L_CONTAINER],
            node=labels[L_NODE],
            deploy_id=labels.get(L_DEPLOY, ""),
            workload=labels.get(L_WORKLOAD, ""),
            priority_class=priority_class,
            priority=int(labels.get(L_PRIORITY, "0")),
            tenant=labels.get(L_TENANT, "default"),
            cpu_request=float(labels.get(L_CPU_REQUEST, "0")),
            cpu_limit=float(labels.get(L_CPU_LIMIT, "0")),
            memory_request=int(labels.get(L_MEMORY_REQUEST, "0")),
            memory_limit=int(labels.get(L_MEMORY_LIMIT, "0")),
            allocation=allocation,
            health_command=tuple(str(part) for part in health) if isinstance(health, list) else (),
            desired=int(labels.get(L_DESIRED, "0")),
            evictions=int(labels.get(L_EVICTIONS, "0")),
            budget=_budget_label(labels.get(L_BUDGET)),
        )
    except (KeyError, ValueError, ValidationError):
        return None


def _budget_label(text: str | None) -> dict[str, object]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def engine_name(container_id: str) -> str:
    """The engine's name of an eru container (`eru-<container id>`)."""
    return ENGINE_NAME_PREFIX + container_id


STRAY_PREFIX = "stray-"


def named_by_eru(name: str, container_id: str) -> bool:
    """True when the engine names the container as eru does (`eru-<container id>` of its `eru.container_id` label);
    an engine that names nothing counts as eru's. False for a stray: eru's labels on a container eru did not make
    (started by hand, copied from another), which the inventory reports `unknown` (docs/node-agent.md)."""
    return not name or name == engine_name(container_id)


def stray_id(engine_id: str) -> str:
    """The id an inventory reports a stray by, `stray-<the engine's short id>`: subject-safe (a `remove` command
    can name it), unique on the engine, never an eru container's id, and whatever labels the stray copied."""
    return STRAY_PREFIX + engine_id[:12]


def stray_engine_id(container_id: str) -> str | None:
    """The engine's short id in a stray's reported id; None for an eru container id."""
    if not container_id.startswith(STRAY_PREFIX):
        return None
    short = container_id.removeprefix(STRAY_PREFIX)
    return short if short and all(c in "0123456789abcdef" for c in short) else None
