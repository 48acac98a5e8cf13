"""The queries capability of the allocator's store (docs/store.md "Capabilities"): the read-only listings and lookups
operators' views answer (`eru.allocator.query`): pods with their nodes counted, containers in (node, creation time,
id) order, one deploy by id or request key, what retention moved to history, the newest deploys with their containers
counted by state, workloads grouped from their containers, the images a workload ran, and one recorded decision.
Implemented by PostgreSQL (`eru_allocator.store.query_store.PgQueries`) and in memory (`eru.testing.memory_queries`);
the contract suite (tests/integration/store/test_queries_contract.py) runs the same cases against both.

Rows are typed; the responders shape them for the reply (`as_row`: column names, JSON decoded, timestamps as ISO
text). `tenant` filters match a tenant and its groups (`team` matches `team` and `team/web`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _decoded(value: str | None) -> Any:
    return None if value is None else json.loads(value)


@dataclass(frozen=True)
class ContainerRecord:
    """A `containers` row (`allocation`, `resources`, `labels`, `previous_allocation` as JSON text; `priority_class`
    is the `class` column)."""

    id: str
    deploy_id: str | None
    node: str
    pod: str
    workload: str
    image: str
    tenant: str
    priority_class: str
    priority: int
    allocation: str
    resources: str
    state: str
    reason: str | None
    labels: str
    previous_allocation: str | None
    replaces: str | None
    created_at: datetime
    updated_at: datetime
    health: str | None

    def as_row(self) -> dict[str, Any]:
        """The row as operations answer it: column names, JSON columns decoded, timestamps as ISO text."""
        return {
            "id": self.id,
            "deploy_id": self.deploy_id,
            "node": self.node,
            "pod": self.pod,
            "workload": self.workload,
            "image": self.image,
            "tenant": self.tenant,
            "class": self.priority_class,
            "priority": self.priority,
            "allocation": json.loads(self.allocation),
            "resources": json.loads(self.resources),
            "state": self.state,
            "reason": self.reason,
            "labels": json.loads(self.labels),
            "previous_allocation": _decoded(self.previous_allocation),
            "replaces": self.replaces,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "health": self.health,
        }


@dataclass(frozen=True)
class NodeListing:
    """A node as `eru node ls` lists it: capacity and usage (JSON columns decoded), state and cordon flag, its newest
    condition, the agent's and the operator's labels, live containers, what tenants reserved on it (cores, bytes,
    their names comma-separated), the watermark overrides of the node and its pod, whether its agent is `silent`
    (no heartbeat within the listing's `down_after_seconds`), and its live containers' requests grouped
    (`requests`: [stored resources, number of containers] pairs; replacements not counted)."""

    name: str
    pod: str
    cpu_map: dict[str, int]
    memory: int
    numa: dict[str, str]
    numa_memory: dict[str, int]
    used_cpu_map: dict[str, int]
    used_memory: int
    used_numa_memory: dict[str, int]
    labels: dict[str, str]
    state: str
    cordoned: bool
    share_base: int
    heartbeat_at: datetime | None
    version: int
    conditions: dict[str, Any]
    operator_labels: dict[str, str]
    containers: int
    silent: bool
    reserved_cpu: float
    reserved_memory: int
    reserved_for: str
    requests: list[tuple[Any, int]]
    watermark_overrides: dict[str, Any]

    def as_row(self) -> dict[str, Any]:
        """The listed columns in their order (without `silent` and `requests`), timestamps as ISO text."""
        return {
            "name": self.name,
            "pod": self.pod,
            "cpu_map": self.cpu_map,
            "memory": self.memory,
            "numa": self.numa,
            "numa_memory": self.numa_memory,
            "used_cpu_map": self.used_cpu_map,
            "used_memory": self.used_memory,
            "used_numa_memory": self.used_numa_memory,
            "labels": self.labels,
            "state": self.state,
            "cordoned": self.cordoned,
            "share_base": self.share_base,
            "heartbeat_at": _iso(self.heartbeat_at),
            "version": self.version,
            "conditions": self.conditions,
            "operator_labels": self.operator_labels,
            "containers": self.containers,
            "reserved_cpu": self.reserved_cpu,
            "reserved_memory": self.reserved_memory,
            "reserved_for": self.reserved_for,
            "watermark_overrides": self.watermark_overrides,
        }


@dataclass(frozen=True)
class PodCount:
    """A pod with its nodes and cordoned nodes counted."""

    name: str
    created_at: datetime
    nodes: int
    cordoned: int

    def as_row(self) -> dict[str, Any]:
        """`{"name", "created_at" (ISO text), "nodes", "cordoned"}`."""
        return {
            "name": self.name,
            "created_at": self.created_at.isoformat(),
            "nodes": self.nodes,
            "cordoned": self.cordoned,
        }


@dataclass(frozen=True)
class DeployRecord:
    """A live `deploys` row (`request` and `result` as JSON text; `result` None until the deploy ends)."""

    id: str
    request_id: str
    pod: str
    tenant: str
    status: str
    request: str
    result: str | None
    created_at: datetime
    updated_at: datetime

    def as_row(self) -> dict[str, Any]:
        """The row by its column names, JSON decoded, timestamps as ISO text."""
        return {
            "id": self.id,
            "request_id": self.request_id,
            "pod": self.pod,
            "tenant": self.tenant,
            "status": self.status,
            "request": json.loads(self.request),
            "result": _decoded(self.result),
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


@dataclass(frozen=True)
class DeployView:
    """A deploy as the deploys view lists it: status, what it asked for, its decision and error, and its containers
    counted by state (`states`: {"running": 3, "creating": 1})."""

    id: str
    request_id: str | None
    pod: str
    tenant: str
    status: str
    created_at: datetime
    updated_at: datetime | None
    decision_id: str | None
    workload: str | None
    image: str | None
    priority_class: str | None
    count: int
    error: str | None
    states: dict[str, int]


@dataclass(frozen=True)
class RecordedDecisionRow:
    """A `decisions` row, its input and output decoded from JSON (a compact input names its batch's snapshot)."""

    id: str
    kind: str
    input: Any
    output: Any
    created_at: datetime


@dataclass(frozen=True)
class DeployOwner:
    """A deploy's id and the tenant it was made for."""

    id: str
    tenant: str


@dataclass(frozen=True)
class WorkloadGroup:
    """A workload (pod, tenant, name) as its containers show it: images, every instance's state, how many deploys
    made them, and how many running instances are unhealthy or still starting their checks."""

    pod: str
    tenant: str
    workload: str
    images: list[str]
    states: list[str]
    deploys: int
    unhealthy: int
    starting: int


@dataclass(frozen=True)
class ImageRun:
    """One image a workload ran: when first and last, containers ever, containers running it now."""

    image: str
    first_at: datetime | None
    last_at: datetime | None
    instances: int
    live: int


@dataclass(frozen=True)
class ContainerPlace:
    """Where a container runs: its node (None before it has one), state, whether that node is silent (no heartbeat
    within the lookup's `down_after_seconds`) and for how many seconds it has been (None: it never beat)."""

    id: str
    node: str | None
    state: str
    silent: bool
    silent_seconds: float | None


@dataclass(frozen=True)
class ContainerFilter:
    """Which containers a page holds: each field given narrows it (`tenant`: a tenant and its groups); gone
    containers (removed, failed, lost) only with `include_gone`."""

    pod: str | None = None
    node: str | None = None
    deploy_id: str | None = None
    container_id: str | None = None
    include_gone: bool = False
    tenant: str | None = None


class QueryStore(Protocol):
    """Read-only listings and lookups of the record (see the module doc)."""

    async def node_page(
        self, pod: str | None, node: str | None, down_after_seconds: float, after: str | None, limit: int | None
    ) -> list[NodeListing]:
        """Nodes (of `pod`, or named `node`) named after `after`, at most `limit` (None: all), in name order."""

    async def pod_page(self, after: str | None, limit: int) -> list[PodCount]:
        """Up to `limit` pods named after `after`, in name order."""

    async def container_page(
        self, which: ContainerFilter, after: tuple[str, datetime, str] | None, limit: int
    ) -> list[ContainerRecord]:
        """Up to `limit` containers of `which` after the (node, created_at, id) `after`, in that order."""

    async def deploy(self, key: str) -> DeployRecord | None:
        """The live deploy whose id or request key is `key`; None when there is none."""

    async def deploy_history(self, key: str) -> str | None:
        """The JSON record of the deploy moved to history whose id or request key is `key`; None when none."""

    async def container_history(self, deploy_id: str, limit: int) -> list[str]:
        """Up to `limit` JSON records of the deploy's containers moved to history, in the order they finished."""

    async def deploy_views(
        self, pod: str | None, limit: int, before: tuple[datetime, str] | None, tenant: str | None
    ) -> list[DeployView]:
        """The newest `limit` deploys (of `pod`, or all; of `tenant`) older than `before` (creation time, id),
        newest first."""

    async def workload_groups(
        self,
        pod: str | None,
        include_gone: bool,
        tenant: str | None,
        after: tuple[str, str, str] | None,
        limit: int,
    ) -> list[WorkloadGroup]:
        """Up to `limit` workloads after `after` (pod, tenant, name), in that order; gone instances counted when
        `include_gone`."""

    async def image_runs(self, workload: str, pod: str | None, tenant: str | None) -> list[ImageRun]:
        """The images `workload` ran, live containers and those moved to history, by first use."""

    async def decision(self, decision_id: str) -> RecordedDecisionRow | None:
        """The decision `decision_id` as recorded; None when there is no such row."""

    async def decision_expired_at(self, decision_id: str) -> datetime | None:
        """For a decision not found: when retention dropped the time range its id was created in (docs/operations.md
        "Retention"); None when nothing says it expired."""

    async def full_input(self, problem: Mapping[str, Any]) -> dict[str, Any]:
        """A recorded decision's input as a full `eru plan` problem: a compact one's batch snapshot put back
        (docs/replay.md), a full one as it is; `InvalidInput` naming `input.snapshot` when retention dropped it."""

    async def deploy_expired_at(self, deploy_id: str) -> datetime | None:
        """For a deploy found neither live nor in history: when retention dropped the time range of history its id
        was created in (docs/operations.md "Retention"); None when nothing says it expired."""

    async def container_place(self, container_id: str, down_after_seconds: float) -> ContainerPlace | None:
        """Where `container_id` runs, its node silent after `down_after_seconds`; None when the id is unknown."""

    async def container_tenants(self, container_ids: Sequence[str]) -> dict[str, str]:
        """Container id → its tenant, for those of `container_ids` that exist (unknown ids are absent)."""

    async def deploy_owner(self, deploy_id: str, request_id: str | None) -> DeployOwner | None:
        """The deploy whose id is `deploy_id` or whose request key is `request_id`; None when there is none."""


def tenant_matches(tenant: str, wanted: str | None) -> bool:
    """Whether `tenant` is `wanted` or one of its groups' members (`split_part(tenant, '/', 1) = wanted`)."""
    return wanted is None or tenant.split("/", 1)[0] == wanted


__all__ = [
    "ContainerFilter",
    "ContainerPlace",
    "ContainerRecord",
    "DeployOwner",
    "DeployRecord",
    "DeployView",
    "ImageRun",
    "NodeListing",
    "PodCount",
    "QueryStore",
    "RecordedDecisionRow",
    "WorkloadGroup",
    "tenant_matches",
]
