"""Subject names of the bus (docs/bus.md). Every variable token is checked, so a node name can never widen a subject.

A token is letters, digits, `-` and `_`, starting with a letter or digit, at most 128 characters: no `.`, `*`, `>`
or whitespace, which NATS would read as subject structure or wildcards.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from eru.errors import InvalidInput

PREFIX = "eru"
DEPLOY_REQUEST = "eru.deploy.request"
DISTRIBUTOR_PLACE = "eru.distributor.place"
DISTRIBUTOR_PLACE_BATCH = "eru.distributor.place_batch"  # one allocator batch's requests at once
DEAD_LETTER_PREFIX = "eru.dlq"

TOKEN_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
_SPACE = re.compile(r"\s")


def token(value: str, field: str) -> str:
    """`value` if it is a subject-safe token, else `InvalidInput` naming `field` and what is wrong."""
    if not isinstance(value, str):
        raise InvalidInput(field, f"expected a string, got {type(value).__name__}")
    if not value:
        raise InvalidInput(field, "must not be empty")
    if len(value) > 128:
        raise InvalidInput(field, f"{len(value)} characters, at most 128 fit in a subject token")
    if not TOKEN_PATTERN.match(value):
        raise InvalidInput(
            field,
            f"{value!r} is not a subject-safe name: use letters, digits, '-' and '_', starting with a letter or digit "
            "(no '.', '*', '>' or spaces)",
        )
    return value


def node_name(value: str) -> str:
    """A node name checked for use in subjects (`InvalidInput` on field `node` otherwise)."""
    return token(value, "node")


def deploy_event(deploy_id: str, event: str) -> str:
    """`eru.deploy.<deploy_id>.<event>`: progress of one deploy (planned, completed, partial, failed …)."""
    return f"eru.deploy.{token(deploy_id, 'deploy_id')}.{token(event, 'event')}"


def deploy_events(deploy_id: str) -> str:
    """Filter for every event of one deploy: `eru.deploy.<deploy_id>.*`."""
    return f"eru.deploy.{token(deploy_id, 'deploy_id')}.*"


def node_command(node: str, command: str) -> str:
    """`eru.node.<node>.cmd.<command>`: a command for one node agent."""
    return f"eru.node.{node_name(node)}.cmd.{token(command, 'command')}"


def node_commands(node: str) -> str:
    """Filter for every command of one node: `eru.node.<node>.cmd.*` (the node agent's durable consumer)."""
    return f"eru.node.{node_name(node)}.cmd.*"


def group_command(group: str) -> str:
    """`eru.group.<group>.cmd.batch`: the creates one allocator transaction places on nodes of a sim process's
    command group, in one message (`GroupCommands`, docs/node-agent.md "One message per group")."""
    return f"eru.group.{token(group, 'group')}.cmd.batch"


def group_results(group: str) -> str:
    """`eru.group.<group>.results`: the results of a group's batch (`GroupEvents`), one message for its nodes instead
    of one per node (stream ERU_EVENTS, docs/node-agent.md "One message per group")."""
    return f"eru.group.{token(group, 'group')}.results"


def node_condition(node: str) -> str:
    """`eru.node.<node>.condition`: a node condition change (watermark forbid-schedule, pressure)."""
    return f"eru.node.{node_name(node)}.condition"


def container_event(node: str, event: str) -> str:
    """`eru.container.<node>.<event>`: started, failed, removed, updated … reported by the node agent."""
    return f"eru.container.{node_name(node)}.{token(event, 'event')}"


def metrics(node: str) -> str:
    """`eru.metrics.<node>`: periodic usage samples of one node and its containers."""
    return f"eru.metrics.{node_name(node)}"


def eviction(node: str) -> str:
    """`eru.eviction.<node>`: a suppress/evict decision with the inputs it was computed from."""
    return f"eru.eviction.{node_name(node)}"


def watermarks(scope: str, name: str) -> str:
    """`eru.watermarks.<scope>.<name>`: a node's or a pod's watermark override changed (the whole override)."""
    return f"eru.watermarks.{token(scope, 'scope')}.{token(name, scope)}"


WATERMARKS_ALL = "eru.watermarks.*.*"


def dead_letter(original_subject: str) -> str:
    """`eru.dlq.<original subject>`: where a message that can never be processed is kept, with the reason."""
    tokens = original_subject.split(".")
    # A concrete subject has no empty token, no whitespace and no wildcard token (`*` or `>` alone); characters such
    # as `<` or `>` inside a token are literal to nats-server, so a message published on `eru.t.<tenant>.x` exists
    # and must be dead-lettered like any other.
    if not original_subject or not all(t and t not in ("*", ">") and not _SPACE.search(t) for t in tokens):
        raise InvalidInput("subject", f"{original_subject!r} is not a concrete subject")
    return f"{DEAD_LETTER_PREFIX}.{original_subject}"


def original_of_dead_letter(subject: str) -> str:
    """The subject a dead letter came from (`eru.dlq.eru.deploy.request` → `eru.deploy.request`)."""
    prefix = DEAD_LETTER_PREFIX + "."
    if not subject.startswith(prefix):
        raise InvalidInput("subject", f"{subject!r} is not a dead-letter subject ({prefix}…)")
    return subject[len(prefix) :]


ALLOCATOR_PREFIX = "eru.allocator"


def allocator_operation(operation: str) -> str:
    """`eru.allocator.<operation>`: an operation or query answered by the allocator (request/reply, queue group)."""
    return f"{ALLOCATOR_PREFIX}.{token(operation, 'operation')}"


def node_attach(node: str) -> str:
    """`eru.node.<node>.attach`: the allocator asks a node agent to stream a container's logs or an exec's output
    (core request/reply; docs/node-agent.md "Logs and exec")."""
    return f"eru.node.{node_name(node)}.attach"


ATTACH_PREFIX = "eru.attach"


def attach_stream(tenant: str | None, session: str) -> str:
    """Where a node agent streams one session's output: `eru.t.<tenant>.attach.<session>` for a tenant's client
    (only its credentials may read there), `eru.attach.<session>` for an operator (core NATS, not stored)."""
    if tenant is None:
        return f"{ATTACH_PREFIX}.{token(session, 'session')}"
    return f"{TENANT_PREFIX}.{token(tenant, 'tenant')}.attach.{token(session, 'session')}"


NODE_REGISTRATIONS = "eru.node.*.registered"
NODE_HEARTBEATS = "eru.node.*.heartbeat"
NODE_INVENTORIES = "eru.node.*.inventory"
GROUP_HEARTBEATS = "eru.heartbeats.*"
GROUP_INVENTORIES = "eru.inventories.*"
GROUP_RESULTS = "eru.group.*.results"


def node_registration(node: str) -> str:
    """`eru.node.<node>.registered`: a node agent's `NodeRegistration` (capacity), sent at start (stream ERU_EVENTS)."""
    return f"eru.node.{node_name(node)}.registered"


def node_inventory(node: str) -> str:
    """`eru.node.<node>.inventory`: a node agent's `NodeInventory` (what its engine runs), at start and every
    `ERU_INVENTORY_SECONDS` (stream ERU_METRICS, short retention)."""
    return f"eru.node.{node_name(node)}.inventory"


def node_heartbeat(node: str) -> str:
    """`eru.node.<node>.heartbeat`: a node agent's periodic `Heartbeat` (stream ERU_METRICS, short retention)."""
    return f"eru.node.{node_name(node)}.heartbeat"


def group_heartbeats(group: str) -> str:
    """`eru.heartbeats.<group>`: the `NodeHeartbeats` of a sim process's command group, one message for its nodes
    every heartbeat interval (stream ERU_METRICS, short retention)."""
    return f"eru.heartbeats.{token(group, 'group')}"


def group_inventories(group: str) -> str:
    """`eru.inventories.<group>`: the `NodeInventories` of a sim process's command group, what its nodes took since
    the process's last flush (about a second) in one message (stream ERU_METRICS, short retention)."""
    return f"eru.inventories.{token(group, 'group')}"


# ------------------------------------------------------------------------------------------------------------------
# Tenant-scoped subjects (docs/security.md): a client's credentials allow only `eru.t.<its tenant>.…`, and the
# services take the tenant from the subject, never from the message body.
TENANT_PREFIX = "eru.t"
# Workloads and containers as a unit (docs/cli.md "Workloads"): each takes a `LifecycleRequest`.
LIFECYCLE_OPERATIONS = ("stop", "start", "restart", "dissociate", "remove-workload")
TENANT_DEPLOY_REQUESTS = "eru.t.*.deploy.request"
# The operations a tenant's client may ask for; everything else is an operator's (docs/security.md).
TENANT_OPERATIONS = ("remove", "realloc", "replace", "query", *LIFECYCLE_OPERATIONS)
# Operations a tenant's client may ask for that stream (`eru container logs`, `eru exec`, `eru run`): served by
# eru_allocator.operations.workloads.attach, not by the operations above.
TENANT_STREAM_OPERATIONS = ("attach",)


def tenant_deploy_request(tenant: str) -> str:
    """`eru.t.<tenant>.deploy.request`: a deploy request whose tenant is the sender's (stream ERU_DEPLOY)."""
    return f"{TENANT_PREFIX}.{token(tenant, 'tenant')}.deploy.request"


def tenant_operation(tenant: str, operation: str) -> str:
    """`eru.t.<tenant>.allocator.<operation>`: an operation confined to the tenant's own containers."""
    if operation not in (*TENANT_OPERATIONS, *TENANT_STREAM_OPERATIONS):
        known = ", ".join((*TENANT_OPERATIONS, *TENANT_STREAM_OPERATIONS))
        raise InvalidInput("operation", f"{operation!r} is not open to tenants ({known})")
    return f"{TENANT_PREFIX}.{token(tenant, 'tenant')}.allocator.{operation}"


def tenant_deploy_event(tenant: str, deploy_id: str, event: str) -> str:
    """`eru.t.<tenant>.deploy.<deploy_id>.<event>`: the tenant's copy of a deploy event (core NATS, not stored)."""
    return f"{TENANT_PREFIX}.{token(tenant, 'tenant')}.deploy.{token(deploy_id, 'deploy_id')}.{token(event, 'event')}"


def tenant_container_event(tenant: str, container_id: str, state: str) -> str:
    """`eru.t.<tenant>.container.<container_id>.<state>`: a container of the tenant changed state (core NATS)."""
    return (
        f"{TENANT_PREFIX}.{token(tenant, 'tenant')}.container.{token(container_id, 'container_id')}"
        f".{token(state, 'state')}"
    )


def tenant_of(subject: str) -> str | None:
    """The tenant a tenant-scoped subject belongs to (`eru.t.team-a.deploy.request` → `team-a`), else None."""
    parts = subject.split(".")
    if len(parts) >= 4 and parts[0] == "eru" and parts[1] == "t":
        return token(parts[2], "tenant")
    return None


# ------------------------------------------------------------------------------------------------------------------
# Partitioned deploy work (docs/replicas.md): a deploy request whose pod's partition another allocator replica
# leases is routed there; only allocators publish or read these (clients keep publishing the subjects above).
PARTITION_DEPLOYS = "eru.partition.*.deploy"
H_ORIGIN_SUBJECT = "Eru-Origin-Subject"  # the subject the client published a routed request on
# What each allocator replica holds and works on, for the work-aware balancing (core NATS, allocators only)
PARTITION_WORK = "eru.partition.work"


def origin_subject(subject: str, headers: Mapping[str, str]) -> str:
    """The subject a deploy request was published on: for a routed copy (`eru.partition.<n>.deploy`, which only
    allocators publish) its `Eru-Origin-Subject`, else `subject` itself — a client's own such header means nothing."""
    if subject.startswith("eru.partition."):
        return headers.get(H_ORIGIN_SUBJECT) or DEPLOY_REQUEST
    return subject


def partition_deploy(partition: int) -> str:
    """`eru.partition.<n>.deploy`: deploy requests of the pods that hash to partition n (stream ERU_PARTITIONS)."""
    if partition < 0:
        raise InvalidInput("partition", f"must be 0 or more, got {partition}")
    return f"eru.partition.{partition}.deploy"


def service_health(service: str, replica: str) -> str:
    """A replica's health endpoint (a NATS micro-service endpoint of every service): `eru.svc.<service>.<replica>
    .health`; a request there answers `ready`/`starting`, or "no responders" when no process of that name listens."""
    return f"eru.svc.{service}.{replica}.health"
