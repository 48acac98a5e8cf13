"""Messages of the bus: requests, replies, node commands, container and deploy events, metrics (docs/bus.md, and
docs/pipeline.md, docs/node-agent.md, docs/colocation.md, docs/fairness-and-scoring.md for their rules).

Every message travels as msgpack (JSON accepted where docs/bus.md says so) with the CloudEvents envelope in headers
(`eru.envelope`); the `kind` field of commands and events is their discriminator.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, RootModel, Tag, model_validator

from eru.domain.compact import compact_commands, expand_workloads
from eru.domain.limits import (
    FILTER_NODES_MAX,
    Arguments,
    Capabilities,
    Env,
    ImageReference,
    Labels,
    ModeName,
    Mounts,
    ShortText,
    TenantName,
)

# The allocator's operations and the distributor's messages have modules of their own; they stay importable from
# here, where most callers found them.
from eru.domain.operations import (
    PAGE_SIZE,
    CordonRequest,
    LifecycleRequest,
    OperationReply,
    PodRequest,
    QueryRequest,
    ReallocRequest,
    RemoveRequest,
    ReplaceRequest,
    SetNodeRequest,
    WatermarkOverride,
    WatermarkRequest,
)
from eru.domain.placement import (
    PlaceBatchReply,
    PlaceBatchRequest,
    PlacementSlot,
    PlaceOutcome,
    PlaceReply,
    PlaceRequest,
)
from eru.domain.resources import Allocation, Bytes, Frozen, Name, PriorityClass, ResourceRequest

__all__ = [
    "PAGE_SIZE",
    "Accepted",
    "ContainerEvent",
    "ContainerEvents",
    "ContainerMetrics",
    "ContainerReport",
    "ContainerSpec",
    "ContainerStateChange",
    "CordonRequest",
    "DeployEvent",
    "DeployRequest",
    "ErrorReply",
    "Heartbeat",
    "KeepEvent",
    "LifecycleRequest",
    "Name",
    "NodeCommand",
    "NodeCommandMessage",
    "NodeCommands",
    "NodeFilter",
    "NodeMetrics",
    "NodeRegistration",
    "OperationReply",
    "PlaceBatchReply",
    "PlaceBatchRequest",
    "PlaceOutcome",
    "PlaceReply",
    "PlaceRequest",
    "PlacementSlot",
    "PodRequest",
    "QueryRequest",
    "ReallocRequest",
    "RemoveRequest",
    "ReplaceRequest",
    "SetNodeRequest",
    "WatermarkOverride",
    "WatermarkRequest",
    "Workload",
]


class Workload(Frozen):
    """What is deployed."""

    # Every string is bounded (eru.domain.limits, docs/cli.md "Limits").
    name: Name
    image: ImageReference
    command: Arguments = Field(default_factory=list)
    env: Env = Field(default_factory=dict)
    resources: ResourceRequest = ResourceRequest()
    priority_class: PriorityClass = "prod"
    priority: int = 0
    tenant: TenantName = "default"
    labels: Labels = Field(default_factory=dict)
    health_command: Arguments = Field(default_factory=list)
    # The health check's rhythm (docs/node-agent.md "Health and node TTL"): the command runs every interval (and may
    # take as long), `retries` failures in a row make the container unhealthy.
    health_interval_seconds: float = Field(default=5.0, ge=0.01, le=3600)
    health_retries: int = Field(default=3, ge=1, le=100)
    network_mode: ShortText = "none"
    restart_policy: Literal["no", "on-failure", "unless-stopped", "always"] = "no"
    # Privileges: refused unless the pod's policy allows them (eru.podsecurity, docs/security.md).
    privileged: bool = False
    cap_add: Capabilities = Field(default_factory=list)
    mounts: Mounts = Field(default_factory=list)  # host binds, "HOST_PATH:CONTAINER_PATH[:ro]"
    # A batch workload's eviction budget over the pod's: {"max_unavailable": 3 | "25%", "window_seconds": 600}
    # (validated at deploy, docs/colocation.md "Eviction budgets").
    eviction_budget: dict[str, Any] = Field(default_factory=dict)


class NodeFilter(Frozen):
    """The nodes of the pod a deploy may use (docs/placement-modes.md "Node filters"): only `nodes` (when given),
    never `exclude_nodes`, and only those whose effective labels hold every `labels` pair."""

    nodes: list[Name] = Field(default_factory=list, max_length=FILTER_NODES_MAX)
    exclude_nodes: list[Name] = Field(default_factory=list, max_length=FILTER_NODES_MAX)
    labels: Labels = Field(default_factory=dict)


class DeployRequest(Frozen):
    """The public entry point: published to `eru.deploy.request`."""

    request_id: str | None = Field(default=None, max_length=128)
    pod: Name
    workload: Workload
    count: int = Field(default=1, ge=0)
    mode: ModeName = "auto"
    nodes_limit: int = Field(default=0, ge=0)
    options: dict[str, Any] = Field(default_factory=dict)
    wait_seconds: float = Field(default=0.0, ge=0)
    # A batch deploy eru keeps at `count`: evicted or lost instances are placed again (docs/colocation.md).
    keep: bool = False
    # The workload's desired count for its eviction budget (0: `count`), and the earlier evictions of the instance
    # this request places again: set by eru when it re-places kept batch work.
    desired: int = Field(default=0, ge=0)
    evictions: int = Field(default=0, ge=0)
    node_filter: NodeFilter | None = None


class Accepted(Frozen):
    """Reply to an accepted request."""

    status: Literal["accepted"] = "accepted"
    deploy_id: str


class ErrorReply(Frozen):
    """Reply to a rejected request: a code, a readable message naming the field or rule, and the numbers."""

    status: Literal["error"] = "error"
    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class ContainerSpec(Frozen):
    """A container to run on a node: the workload and its planned allocation."""

    container_id: str
    deploy_id: str
    workload: Workload
    allocation: Allocation
    desired: int = Field(default=0, ge=0)  # the deploy's count (the budget's percentage base)
    evictions: int = Field(default=0, ge=0)  # earlier evictions of this instance's lineage (kept workloads)


class NodeCommand(Frozen):
    """A command for one node agent (`eru.node.<node>.cmd.<kind>`); `command_id` makes it idempotent."""

    command_id: str
    node: Name
    kind: Literal[
        "create",
        "start",
        "stop",
        "restart",
        "remove",
        "dissociate",
        "pause",
        "unpause",
        "update",
        "replace",
        "evict",
        "suppress",
    ]
    container_id: str
    spec: ContainerSpec | None = None
    allocation: Allocation | None = None
    replacement: ContainerSpec | None = None
    reason: str = ""
    # kind `suppress` (the eviction service's CPU squeeze, docs/colocation.md): a CFS quota in cores applied on top of
    # the container's own allocation, within its cpuset and never above its own limit; None lifts it (the container
    # gets exactly its own allocation back).
    cpu_quota: float | None = Field(default=None, ge=0)
    health_timeout_seconds: float = Field(default=10.0, gt=0)


class ContainerEvent(Frozen):
    """What a node agent reports about a container (`eru.container.<node>.<kind>`)."""

    node: Name
    container_id: str
    deploy_id: str | None = None
    command_id: str | None = None
    kind: Literal[
        "started",
        "failed",
        "stopped",
        "removed",
        "paused",
        "unpaused",
        "updated",
        "replaced",
        "found",
        "foreign",
        "lost",
        "dissociated",
        "health",
    ]
    reason: str = ""
    # kind `health`: the container's health check changed (docs/node-agent.md "Health and node TTL")
    health: Literal["starting", "healthy", "unhealthy"] | None = None
    allocation: Allocation | None = None
    command_kind: str | None = None
    replaced_container_id: str | None = None


class NodeCommands(Frozen):
    """Several commands for one node in one message (`eru.node.<node>.cmd.batch`): the containers one deploy places
    on one node. Each command keeps its own id and is executed (once) as if sent alone; the agent answers with one
    `ContainerEvents` carrying every result, whose message id comes from `batch_id`."""

    batch_id: str = Field(min_length=1, max_length=128)
    node: Name
    # Only on the wire (eru.domain.compact): each distinct workload once, named by index in the specs. Decoding
    # puts them back into the specs and leaves this empty; it is validated here only when that failed (before the
    # commands, so that the error names the workload rather than the specs that refer to it).
    workloads: list[Workload] = Field(default_factory=list, max_length=1000, exclude=True)
    commands: list[NodeCommand] = Field(min_length=1, max_length=1000)

    @model_validator(mode="before")
    @classmethod
    def _expand(cls, data: Any) -> Any:
        return expand_workloads(data, Workload.model_validate)

    def wire_form(self) -> dict[str, Any]:
        """The compact wire value (`eru.bus.codec.to_wire` sends it): workloads once, defaults left out."""
        return compact_commands(self.batch_id, self.node, self.commands)


class ContainerEvents(Frozen):
    """Several results of one node in one message (`eru.container.<node>.batch`), in the order of the commands: a
    `cmd.batch`'s results as they are known (all of them, or the part ready)."""

    node: Name
    events: list[ContainerEvent] = Field(min_length=1)

    def wire_form(self) -> dict[str, Any]:
        """The wire value with each event's fields at their defaults left out (a node answers ~25 creates at once)."""
        return {"node": self.node, "events": [e.model_dump(mode="json", exclude_defaults=True) for e in self.events]}


class GroupEvents(Frozen):
    """The results of one `GroupCommands` (or the part of them ready) in one message (`eru.group.<group>.results`,
    docs/node-agent.md "One message per group"): each event names its node, which must be of `group` (`<group>` or
    `<group>-<number>`, eru.nodeagent.heartbeats.check_group_results)."""

    group: Name
    events: list[ContainerEvent] = Field(min_length=1, max_length=1000)

    def wire_form(self) -> dict[str, Any]:
        """The wire value with each event's fields at their defaults left out (as `ContainerEvents`)."""
        return {"group": self.group, "events": [e.model_dump(mode="json", exclude_defaults=True) for e in self.events]}


class GroupCommands(Frozen):
    """The creates of one allocator transaction for several nodes of a sim process's command group, in one message
    (`eru.group.<group>.cmd.batch`, docs/node-agent.md "One message per group"). Each command names its own node;
    the process runs each node's part exactly as that node's own message would be run (one command as a plain
    command, several as a `NodeCommands` whose `batch_id` is `<batch_id>/<node>`), and answers per node."""

    batch_id: str = Field(min_length=1, max_length=128)
    group: Name
    # Only on the wire, as in NodeCommands: each distinct workload once (eru.domain.compact).
    workloads: list[Workload] = Field(default_factory=list, max_length=1000, exclude=True)
    commands: list[NodeCommand] = Field(min_length=1, max_length=1000)

    @model_validator(mode="before")
    @classmethod
    def _expand(cls, data: Any) -> Any:
        return expand_workloads(data, Workload.model_validate)

    def wire_form(self) -> dict[str, Any]:
        """The compact wire value: workloads once, defaults left out."""
        return compact_commands(self.batch_id, self.group, self.commands, owner="group")

    def parts(self) -> dict[str, list[NodeCommand]]:
        """Each node's commands, in the order of the message (nodes in the order of their first command)."""
        parts: dict[str, list[NodeCommand]] = {}
        for command in self.commands:
            parts.setdefault(command.node, []).append(command)
        return parts


def _batch_or_one(items_field: str) -> Discriminator:
    # The single variant's tag is "" so that its errors read `kind`, not `<tag>.kind` (codec.field_path skips it).
    return Discriminator(lambda value: "batch" if isinstance(value, dict) and items_field in value else "")


class ContainerReport(
    RootModel[
        Annotated[
            Annotated[ContainerEvents, Tag("batch")] | Annotated[ContainerEvent, Tag("")],
            _batch_or_one("events"),
        ]
    ]
):
    """What arrives on `eru.container.<node>.<kind>`: one event, or a node's batch of them (kind `batch`)."""

    def events(self) -> list[ContainerEvent]:
        """The events in the order the node reported them."""
        return self.root.events if isinstance(self.root, ContainerEvents) else [self.root]


def _command_message(value: Any) -> str:
    if isinstance(value, dict) and "commands" in value:
        return "group" if "group" in value else "batch"
    return ""


class NodeCommandMessage(
    RootModel[
        Annotated[
            Annotated[GroupCommands, Tag("group")]
            | Annotated[NodeCommands, Tag("batch")]
            | Annotated[NodeCommand, Tag("")],
            Discriminator(_command_message),
        ]
    ]
):
    """What arrives on `eru.node.<node>.cmd.<kind>`: one command, or a batch of them (kind `batch`); on a command
    group's `eru.group.<group>.cmd.batch`, a `GroupCommands`."""

    def commands(self) -> list[NodeCommand]:
        """The commands in the order they were sent."""
        return self.root.commands if isinstance(self.root, (NodeCommands, GroupCommands)) else [self.root]


class NodeRegistration(Frozen):
    """A node agent announcing its node and capacity (docs/node-agent.md)."""

    node: Name
    pod: Name
    cpu_map: dict[str, int]
    memory: Bytes
    numa: dict[str, str] = Field(default_factory=dict)
    numa_memory: dict[str, int] = Field(default_factory=dict)
    share_base: int = Field(default=100, gt=0)
    labels: Labels = Field(default_factory=dict)
    runtime: Literal["docker", "sim"] = "docker"


class Heartbeat(Frozen):
    """A node agent is alive; `containers` are the ids it runs."""

    node: Name
    containers: list[str] = Field(default_factory=list)


HEARTBEATS_MAX = 1000  # nodes in one `NodeHeartbeats` (a process of more nodes sends several)


class NodeHeartbeats(Frozen):
    """The heartbeats of the nodes of one sim process's command group in one message (`eru.heartbeats.<group>`,
    docs/node-agent.md "Idle cost"): each node is `<group>` or `<group>-<number>`."""

    group: Name
    beats: list[Heartbeat] = Field(min_length=1, max_length=HEARTBEATS_MAX)
    # the process reads its group's command batches (`eru.group.<group>.cmd.batch`, docs/node-agent.md "One message
    # per group"); a process from before them sends none, and the allocator keeps sending it per-node commands
    group_batches: bool = False


class ContainerMetrics(Frozen):
    """One container's usage in a metrics sample."""

    container_id: str
    priority_class: PriorityClass
    priority: int
    tenant: str
    cpu_used: float
    memory_used: int
    throttled_periods: int = 0
    throttled_seconds: float = 0.0
    cpu_request: float = 0.0
    cpu_limit: float = 0.0
    memory_request: int = 0
    memory_limit: int = 0
    # For eviction budgets and progress-aware victims (docs/colocation.md): the workload, its desired count, the
    # instance's earlier evictions and the workload's own budget (`{"max_unavailable", "window_seconds"}`).
    workload: str = ""
    desired: int = Field(default=0, ge=0)
    evictions: int = Field(default=0, ge=0)
    budget: dict[str, Any] = Field(default_factory=dict)
    # Cores of its cpuset when the container is CPU-bound (0: not bound): what it could use unsuppressed.
    cpu_cores: int = Field(default=0, ge=0)


class NodeMetrics(Frozen):
    """A node's sample (`eru.metrics.<node>`), published every `metrics_interval`."""

    node: Name
    time: float
    cpu_capacity: float
    cpu_used: float
    memory_used: int
    memory_total: int
    batch_cpu_allowed: float | None = None
    containers: list[ContainerMetrics] = Field(default_factory=list)
    pod: str | None = None  # lets the eviction service pick the pod's watermarks (docs/colocation.md)
    # What the node registered for placement (cores, bytes; e.g. a share of MemTotal): batch capacity never exceeds it.
    registered_cpu: float | None = Field(default=None, ge=0)
    registered_memory: int | None = Field(default=None, ge=0)


class KeepEvent(Frozen):
    """What eru did for one instance of a kept batch deploy (a `DeployEvent` of kind `keep`, docs/colocation.md)."""

    deploy_id: str
    lineage: str
    kind: Literal["evicted", "lost", "replacing", "placed", "gave_up"]
    container_id: str | None = None
    evictions: int = 0
    due_in_seconds: float | None = None
    request_id: str | None = None
    reason: str = ""


class DeployEvent(Frozen):
    """Progress of a deploy (`eru.deploy.<deploy_id>.<kind>`); completed, partial and failed are terminal."""

    deploy_id: str
    kind: Literal["accepted", "planned", "progress", "completed", "partial", "failed", "keep"]
    placements: dict[str, int] = Field(default_factory=dict)
    started: list[str] = Field(default_factory=list)
    failed: dict[str, str] = Field(default_factory=dict)
    error: ErrorReply | None = None
    decision_id: str | None = None
    keep: KeepEvent | None = None  # kind `keep`: what eru did for an instance of a kept batch deploy


class ContainerStateChange(Frozen):
    """A tenant's container changed state (`eru.t.<tenant>.container.<container_id>.<state>`, core NATS): what a
    tenant's client may see of container events (docs/security.md)."""

    container_id: str
    deploy_id: str | None = None
    state: str
    reason: str | None = None
