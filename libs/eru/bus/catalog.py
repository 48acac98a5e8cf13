"""Every subject of the bus with its message schema, producers and consumers; renders docs/subjects.md.

The reference is generated from the pydantic models (`python -m eru.bus.catalog > docs/subjects.md`), and a test
checks that the committed file is current, so the documentation cannot drift from the code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from eru.bus.balance import WorkReport
from eru.domain.attach import AgentAttach, AttachChunk, AttachReply, AttachRequest
from eru.domain.colocation import EvictionDecision, NodeCondition
from eru.domain.inventory import NodeInventories, NodeInventory, ReconcileRequest
from eru.domain.messages import (
    Accepted,
    ContainerEvent,
    ContainerEvents,
    ContainerStateChange,
    CordonRequest,
    DeployEvent,
    DeployRequest,
    ErrorReply,
    GroupCommands,
    GroupEvents,
    Heartbeat,
    LifecycleRequest,
    NodeCommand,
    NodeCommands,
    NodeHeartbeats,
    NodeMetrics,
    NodeRegistration,
    OperationReply,
    PlaceBatchReply,
    PlaceBatchRequest,
    PlaceReply,
    PlaceRequest,
    PodRequest,
    QueryRequest,
    ReallocRequest,
    RemoveRequest,
    ReplaceRequest,
    SetNodeRequest,
    WatermarkOverride,
    WatermarkRequest,
)
from eru.domain.tenants import (
    TenantCreateRequest,
    TenantListRequest,
    TenantRemoveRequest,
    TenantReservationsRequest,
    TenantReserveRequest,
    TenantSetRequest,
    TenantUnreserveRequest,
)


@dataclass(frozen=True)
class SubjectEntry:
    """One subject (or family): what travels on it, where it is stored, who sends and who reads it."""

    subject: str
    model: type[BaseModel]
    stream: str
    producers: str
    consumers: str
    what: str
    reply: type[BaseModel] | None = None


def _operation(name: str, model: type[BaseModel], what: str) -> SubjectEntry:
    return SubjectEntry(
        f"eru.allocator.{name}", model, "—", "operators (`eru` CLI)", "allocator (queue group)", what, OperationReply
    )


def _tenant_operation(name: str, model: type[BaseModel], what: str) -> SubjectEntry:
    return SubjectEntry(
        f"eru.t.<tenant>.allocator.{name}",
        model,
        "—",
        "the tenant's clients",
        "allocator (queue group)",
        f"{what}, confined to the tenant's own containers (anybody else's: `permission_denied`)",
        OperationReply,
    )


CATALOG: tuple[SubjectEntry, ...] = (
    SubjectEntry(
        "eru.deploy.request",
        DeployRequest,
        "ERU_DEPLOY",
        "clients, `eru deploy`",
        "allocator (durable `allocator-deploy`)",
        "the public entry point; with a reply subject the sender gets `Accepted` or `ErrorReply`, at most once: "
        "no answer after a while, ask again with the same `request_id` under a new message id (docs/deploy.md "
        '"Clients: ask again with the same request id")',
        Accepted,
    ),
    SubjectEntry(
        "eru.deploy.<deploy_id>.<event>",
        DeployEvent,
        "ERU_DEPLOY",
        "allocator (outbox relay)",
        "clients following a deploy, `eru deploy --wait`",
        "progress: planned, completed, partial, failed",
    ),
    SubjectEntry(
        "eru.t.<tenant>.deploy.request",
        DeployRequest,
        "ERU_DEPLOY",
        "the tenant's clients (only its credentials may publish here)",
        "allocator (durable `allocator-tenant-deploy`)",
        "a deploy whose tenant is the subject's, never the body's (docs/security.md)",
        Accepted,
    ),
    SubjectEntry(
        "eru.t.<tenant>.deploy.<deploy_id>.<event>",
        DeployEvent,
        "— (core copy)",
        "allocator (outbox relay)",
        "the tenant's clients, `eru deploy` with client credentials",
        "the tenant's copy of each deploy event",
    ),
    SubjectEntry(
        "eru.t.<tenant>.container.<container_id>.<state>",
        ContainerStateChange,
        "— (core)",
        "allocator (after each committed batch of container events)",
        "the tenant's clients",
        "a container of the tenant changed state (running, stopping, removed, failed …)",
    ),
    SubjectEntry(
        "eru.partition.<n>.deploy",
        DeployRequest,
        "ERU_PARTITIONS",
        "allocator (the replica that took the request from `eru.deploy.request` or `eru.t.<tenant>.deploy.request`)",
        "allocator (durable `allocator-partition-<n>`, read by the replica leasing partition n)",
        "a deploy request routed to the replica that owns its pod's partition (docs/replicas.md), unchanged, with "
        "the client's reply address and `Eru-Origin-Subject`; a work queue (a message leaves once acknowledged)",
        Accepted,
    ),
    SubjectEntry(
        "eru.partition.work",
        WorkReport,
        "— (core)",
        "allocator (every replica, every lease tick and when a partition becomes busy or is handed over)",
        "allocator (every replica)",
        "what a replica leases and which of those partitions are busy; a replica with two units of work hands a "
        'lease over to an idle peer, named in `handed` (docs/replicas.md "Busy partitions move")',
    ),
    SubjectEntry(
        "eru.distributor.place",
        PlaceRequest,
        "— (core request/reply)",
        "allocator",
        "distributor (queue group)",
        "per-node instance counts for one request",
        PlaceReply,
    ),
    SubjectEntry(
        "eru.distributor.place_batch",
        PlaceBatchRequest,
        "— (core request/reply)",
        "allocator (one per batch of deploy requests)",
        "distributor (queue group)",
        "per-node instance counts for every request of a batch, each decided on its own",
        PlaceBatchReply,
    ),
    SubjectEntry(
        "eru.node.<node>.cmd.<command>",
        NodeCommand,
        "ERU_NODE",
        "allocator (outbox), eviction",
        "the node agent of <node> (durable `node-agent-<node>`, or its sim process's `node-group-<group>`)",
        "create, start, stop, restart, remove, dissociate, pause, unpause, update, replace, evict",
    ),
    SubjectEntry(
        "eru.node.<node>.cmd.batch",
        NodeCommands,
        "ERU_NODE",
        "allocator (outbox)",
        "the node agent of <node> (durable `node-agent-<node>`, or its sim process's `node-group-<group>`)",
        "the containers one deploy places on <node>: each command run once, answered by `ContainerEvents` as they run",
    ),
    SubjectEntry(
        "eru.group.<group>.cmd.batch",
        GroupCommands,
        "ERU_NODE",
        "allocator (outbox)",
        "the sim process of command group <group> (durable `node-group-<group>`)",
        "the creates of one transaction on nodes of <group>: each node's part run as its own message would be",
    ),
    SubjectEntry(
        "eru.container.<node>.<event>",
        ContainerEvent,
        "ERU_EVENTS",
        "node agent of <node>",
        "allocator (durable `allocator-container-events`)",
        "results of commands, what an agent finds after a restart, health checks that changed (`health`)",
    ),
    SubjectEntry(
        "eru.container.<node>.batch",
        ContainerEvents,
        "ERU_EVENTS",
        "node agent of <node>",
        "allocator (durable `allocator-container-events`)",
        "results of a `cmd.batch` as they are known (all, or the part ready), in the order of its commands; message id "
        "derived from the batch id (for a part, and its command ids)",
    ),
    SubjectEntry(
        "eru.group.<group>.results",
        GroupEvents,
        "ERU_EVENTS",
        "the sim process of command group <group>",
        "allocator (durable `allocator-group-results`)",
        "the results of a group's batch (`eru.group.<group>.cmd.batch`) for all its nodes in one message, in the "
        "order of its commands; each event names its node, which must be of <group>; message id derived from the "
        "group and the batch id (for a part, and its command ids)",
    ),
    SubjectEntry(
        "eru.node.<node>.registered",
        NodeRegistration,
        "ERU_EVENTS",
        "node agent of <node>",
        "allocator (durable `allocator-registrations`)",
        "the node's capacity, at every start of its agent",
    ),
    SubjectEntry(
        "eru.node.<node>.heartbeat",
        Heartbeat,
        "ERU_METRICS",
        "node agent of <node>",
        "allocator (durable `allocator-heartbeats`)",
        "the agent is alive; a silent node is taken as down",
    ),
    SubjectEntry(
        "eru.heartbeats.<group>",
        NodeHeartbeats,
        "ERU_METRICS",
        "sim node-agent process of command group <group>",
        "allocator (durable `allocator-group-heartbeats`)",
        "its nodes' heartbeats in one message per interval (at most 1,000 nodes each); nodes `<group>` or "
        "`<group>-<number>` only",
    ),
    SubjectEntry(
        "eru.node.<node>.inventory",
        NodeInventory,
        "ERU_METRICS",
        "node agent of <node>",
        "allocator (durable `allocator-inventories`: the reconciler)",
        "everything the node's engine runs with its applied resources, at start and every `ERU_INVENTORY_SECONDS`",
    ),
    SubjectEntry(
        "eru.inventories.<group>",
        NodeInventories,
        "ERU_METRICS",
        "sim node-agent process of command group <group>",
        "allocator (durable `allocator-group-inventories`: the reconciler)",
        "its nodes' inventories taken since its last flush (about a second), in one message (at most 1,000 nodes "
        "each); nodes `<group>` or `<group>-<number>` only",
    ),
    SubjectEntry(
        "eru.metrics.<node>",
        NodeMetrics,
        "ERU_METRICS",
        "node agent of <node>",
        "eviction (partitioned by node)",
        "usage samples of the node and its containers, every metrics interval",
    ),
    SubjectEntry(
        "eru.node.<node>.condition",
        NodeCondition,
        "ERU_EVENTS",
        "eviction",
        "allocator (batch placement), `eru node ls`",
        "watermark state: forbid-schedule, suppression, eviction; reclaimed batch capacity",
    ),
    SubjectEntry(
        "eru.watermarks.<scope>.<name>",
        WatermarkOverride,
        "ERU_EVENTS",
        "allocator (outbox, after `eru.allocator.watermarks`)",
        "eviction (every replica, core subscription), `eru events`",
        "a node's (`scope` node) or a pod's watermark override changed: the whole override and its version",
    ),
    SubjectEntry(
        "eru.eviction.<node>",
        EvictionDecision,
        "ERU_EVENTS",
        "eviction",
        "`eru events`, `eru replay`",
        "a suppress or evict decision with its numbers and its whole input",
    ),
    _operation("remove", RemoveRequest, "remove containers (resources return when the agent confirms)"),
    _operation("realloc", ReallocRequest, "change resources of running containers by deltas (docs/planning.md)"),
    _operation("replace", ReplaceRequest, "replace containers in place with their allocation (docs/planning.md)"),
    _operation("stop", LifecycleRequest, "stop containers or a workload; a stopped container keeps its allocation"),
    _operation("start", LifecycleRequest, "start stopped containers or a workload's"),
    _operation("restart", LifecycleRequest, "restart containers or a workload's (stop, then start, in place)"),
    _operation(
        "dissociate", LifecycleRequest, "stop managing containers: the ledger releases them, the engine keeps them"
    ),
    _operation("remove-workload", LifecycleRequest, "remove every live container of a workload"),
    _operation("set-node", SetNodeRequest, "change a node's capacity (docs/planning.md)"),
    _operation("cordon", CordonRequest, "cordon or uncordon a node"),
    _operation("pod-create", PodRequest, "create a pod"),
    _operation(
        "watermarks",
        WatermarkRequest,
        "set or clear a node's or a pod's watermark overrides, all or nothing (docs/colocation.md)",
    ),
    _operation("query", QueryRequest, "read nodes, pods, containers and deploys"),
    _operation("reconcile", ReconcileRequest, "compare the ledger with the nodes' inventories; act unless dry_run"),
    _operation(
        "tenant-create", TenantCreateRequest, "create a tenant: weight, quota, limit (docs/fairness-and-scoring.md)"
    ),
    _operation("tenant-set", TenantSetRequest, "change a tenant's weight, quota or limit"),
    _operation("tenant-ls", TenantListRequest, "tenants with what they hold, waiting requests and dominant shares"),
    _operation("tenant-rm", TenantRemoveRequest, "remove a tenant that holds no container and no waiting request"),
    _operation("tenant-reserve", TenantReserveRequest, "reserve a node's cpu/memory for a tenant (operators only)"),
    _operation("tenant-unreserve", TenantUnreserveRequest, "drop a tenant's reservation on a node (operators only)"),
    _operation("tenant-reservations", TenantReservationsRequest, "reservations with what their tenants use of them"),
    _tenant_operation("remove", RemoveRequest, "remove containers"),
    _tenant_operation("realloc", ReallocRequest, "change resources of running containers"),
    _tenant_operation("replace", ReplaceRequest, "replace a container in place"),
    _tenant_operation("query", QueryRequest, "read the tenant's containers, deploys, workloads and the pods"),
    _tenant_operation("stop", LifecycleRequest, "stop the tenant's containers or workload"),
    _tenant_operation("start", LifecycleRequest, "start the tenant's stopped containers or workload"),
    _tenant_operation("restart", LifecycleRequest, "restart the tenant's containers or workload"),
    _tenant_operation("dissociate", LifecycleRequest, "stop managing the tenant's containers (the engine keeps them)"),
    _tenant_operation("remove-workload", LifecycleRequest, "remove every live container of the tenant's workload"),
    SubjectEntry(
        "eru.allocator.attach",
        AttachRequest,
        "—",
        "operators (`eru container logs`, `eru exec`, `eru run`)",
        "allocator (queue group)",
        "stream a container's logs or run a command in it: the allocator finds its node (down: `unavailable`) and "
        'forwards the request to `eru.node.<node>.attach` (docs/node-agent.md "Logs and exec")',
        AttachReply,
    ),
    SubjectEntry(
        "eru.t.<tenant>.allocator.attach",
        AttachRequest,
        "—",
        "the tenant's clients",
        "allocator (queue group)",
        "the same, confined to the tenant's own containers (anybody else's: `permission_denied`); the output goes "
        "to `eru.t.<tenant>.attach.<session>`",
        AttachReply,
    ),
    SubjectEntry(
        "eru.node.<node>.attach",
        AgentAttach,
        "—",
        "allocator (after checking the caller)",
        "the node's agent (a queue group per node)",
        "start a logs or exec session streaming to `subject`",
        AttachReply,
    ),
    SubjectEntry(
        "eru.attach.<session>, eru.t.<tenant>.attach.<session>",
        AttachChunk,
        "— (core)",
        "node agents",
        "the client of the session (it answers `ping` requests)",
        "a session's output in chunks below the max payload, numbered from 0, then `end` with the exit code",
    ),
)
ERROR_REPLY = ErrorReply


def _type_of(schema: dict[str, Any] | bool, definitions: dict[str, Any]) -> str:
    if not isinstance(schema, dict):
        return "any"
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " | ".join(_type_of(option, definitions) for option in schema["anyOf"])
    if "enum" in schema:
        return " | ".join(repr(value) for value in schema["enum"])
    if "const" in schema:
        return repr(schema["const"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list[{_type_of(schema.get('items', {}), definitions)}]"
    if kind == "object" and "additionalProperties" in schema:
        return f"map[str, {_type_of(schema['additionalProperties'], definitions)}]"
    return str(kind)


def _fields(model: type[BaseModel]) -> list[str]:
    schema = model.model_json_schema(mode="serialization")
    definitions = schema.get("$defs", {})
    required = set(schema.get("required", []))
    rows = ["| field | type | default |", "|---|---|---|"]
    for name, prop in schema.get("properties", {}).items():
        default = "required" if name in required else f"`{prop.get('default')!r}`" if "default" in prop else ""
        rows.append(f"| `{name}` | {_type_of(prop, definitions).replace('|', '/')} | {default} |")
    return rows


def _nested(entries: Sequence[SubjectEntry]) -> list[type[BaseModel]]:
    """Models referenced from the messages (Workload, Allocation …), each documented once."""
    seen: dict[str, type[BaseModel]] = {}
    for entry in entries:
        for model in (entry.model, entry.reply):
            if model is None:
                continue
            for field in model.model_fields.values():
                for candidate in _models_in(field.annotation):
                    seen.setdefault(candidate.__name__, candidate)
    top = {e.model.__name__ for e in entries} | {e.reply.__name__ for e in entries if e.reply}
    return [model for name, model in sorted(seen.items()) if name not in top]


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation, *[m for f in annotation.model_fields.values() for m in _models_in(f.annotation)]]
    return [m for arg in getattr(annotation, "__args__", ()) for m in _models_in(arg)]


def render_subject_reference(entries: Sequence[SubjectEntry] = CATALOG) -> str:
    """docs/subjects.md: the subject table, then every message's fields (from its pydantic model)."""
    lines = [
        "# Subject reference",
        "",
        "Generated from the pydantic models by `python -m eru.bus.catalog` (a test keeps it current). Every message",
        "carries the CloudEvents envelope in its headers and a msgpack body (JSON with `Content-Type:",
        "application/json` where docs/bus.md says so). Errors are answered as `ErrorReply`.",
        "",
        "| subject | message | stream | producers | consumers | what |",
        "|---|---|---|---|---|---|",
    ]
    for e in entries:
        message = f"`{e.model.__name__}`" + (f" → `{e.reply.__name__}`" if e.reply else "")
        lines.append(f"| `{e.subject}` | {message} | {e.stream} | {e.producers} | {e.consumers} | {e.what} |")
    documented: list[type[BaseModel]] = []
    for e in entries:
        for model in (e.model, e.reply):
            if model is not None and model not in documented:
                documented.append(model)
    documented += [ERROR_REPLY, *_nested(entries)]
    for model in documented:
        lines += ["", f"## {model.__name__}", "", (model.__doc__ or "").strip().splitlines()[0], "", *_fields(model)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_subject_reference(), end="")
