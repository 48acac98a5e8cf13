"""Operations and queries of the allocator: request/reply on `eru.allocator.<operation>`, queue group
(docs/pipeline.md; list queries page with a cursor, docs/bus.md "Paging")."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, model_validator

from eru.domain.limits import (
    LABEL_KEY_MAX,
    LABELS_MAX,
    Arguments,
    Env,
    Identifier,
    ImageReference,
    Labels,
    ShortText,
    TenantName,
)
from eru.domain.resources import Bytes, Frozen, Name


class RemoveRequest(Frozen):
    """Stop and remove containers; their resources return to the node when the agent confirms."""

    container_ids: list[Identifier] = Field(min_length=1)
    reason: ShortText = ""


class LifecycleRequest(Frozen):
    """Stop, start, restart, dissociate or remove containers (`eru.allocator.{stop,start,restart,dissociate,
    remove-workload}`): the ones named in `container_ids`, or every live instance of `workload` (in `pod`, of
    `tenant` when given), never both (docs/cli.md "Workloads")."""

    container_ids: list[str] = Field(default_factory=list, max_length=1000)
    workload: Name | None = None
    pod: Name | None = None
    tenant: TenantName | None = None
    reason: ShortText = ""

    @model_validator(mode="after")
    def _one_target(self) -> LifecycleRequest:
        if bool(self.container_ids) == (self.workload is not None):
            raise ValueError("name either container_ids or a workload, not both and not neither")
        return self


class ReallocRequest(Frozen):
    """Change running containers' resources by deltas (docs/planning.md); `cpu_bind`, `keep_cpu_bind` are absolute."""

    container_ids: list[Identifier] = Field(min_length=1)
    cpu_request: float = 0.0
    cpu_limit: float = 0.0
    memory_request: Bytes = 0
    memory_limit: Bytes = 0
    cpu_bind: bool | None = None
    keep_cpu_bind: bool = False


class ReplaceRequest(Frozen):
    """Update a container in place (docs/planning.md): the new one takes the old one's allocation."""

    container_id: Identifier
    image: ImageReference | None = None
    command: Arguments | None = None
    env: Env | None = None
    health_timeout_seconds: float = Field(default=10.0, gt=0)


class SetNodeRequest(Frozen):
    """Add a node or change its resources (docs/planning.md); fields left out keep their value. `labels` sets
    operator labels and `remove_labels` removes operator labels by key, kept beside the labels the node's agent
    reports (an agent re-registering keeps them; docs/placement-modes.md "Node filters")."""

    node: Name
    pod: Name | None = None
    cpu_map: dict[str, int] | None = None
    memory: Bytes | None = None
    numa: dict[str, str] | None = None
    numa_memory: dict[str, int] | None = None
    share_base: int | None = Field(default=None, gt=0)
    labels: Labels | None = None
    remove_labels: list[Annotated[str, StringConstraints(min_length=1, max_length=LABEL_KEY_MAX)]] | None = Field(
        default=None, max_length=LABELS_MAX
    )


class CordonRequest(Frozen):
    """Stop (or resume) placing new instances on a node; running containers are not touched."""

    node: Name
    cordoned: bool = True


class WatermarkRequest(Frozen):
    """Set or clear a node's or a pod's watermark overrides (docs/colocation.md "Watermarks set live"): `set` keys
    to integer percentages, `clear` keys, `clear_all` drops the whole override first; all or nothing."""

    scope: Literal["node", "pod"]
    name: Name
    set: dict[str, int] = Field(default_factory=dict)
    clear: list[str] = Field(default_factory=list)
    clear_all: bool = False


class WatermarkOverride(Frozen):
    """A node's or a pod's watermark override as stored (`watermark_overrides`), the whole of it; `version` grows
    with every change, so a reader keeps the newest (an empty `settings` is a cleared override)."""

    scope: Literal["node", "pod"]
    name: Name
    settings: dict[str, int] = Field(default_factory=dict)
    version: int = Field(ge=1)


class PodRequest(Frozen):
    """Create a pod (idempotent)."""

    name: Name


PAGE_SIZE = 500  # rows per page of a list query, and the most a request may ask for (docs/bus.md, paging)


class QueryRequest(Frozen):
    """Read the record: nodes, pods, containers, deploys or one deploy (paged); one recorded decision.

    Nodes, pods, containers, deploys (newest first, with their containers counted by state) and a deploy's
    containers come one page of at most `limit` rows at a time, `next_cursor` continuing (docs/bus.md, paging);
    `decision` is one recorded decision by `decision_id` (kind, input, output) — what the web console reads
    (docs/console.md); `watermarks` every stored watermark override (`WatermarkOverride` rows, unpaged: an
    eviction replica's resync); `workload_history` the images a `workload` has run, oldest first (unpaged: one row
    per image; docs/cli.md "Rolling replace")."""

    what: Literal[
        "nodes", "pods", "containers", "deploy", "deploys", "decision", "watermarks", "workloads", "workload_history"
    ]
    pod: str | None = None
    workload: str | None = Field(default=None, max_length=253)
    node: str | None = None
    deploy_id: str | None = None
    container_id: str | None = None
    decision_id: str | None = None
    include_gone: bool = False
    limit: int = Field(default=PAGE_SIZE, ge=1, le=PAGE_SIZE)
    cursor: str | None = Field(default=None, max_length=1024)


class OperationReply(Frozen):
    """The answer to an operation or query: what changed, warnings, and rows (plain JSON values)."""

    status: Literal["ok"] = "ok"
    message: str = ""
    warnings: list[str] = Field(default_factory=list)
    rows: list[dict[str, Any]] = Field(default_factory=list)
    next_cursor: str | None = None  # a list query's next page (docs/bus.md, paging); None on the last page
