"""What the operations on containers (remove, replace, realloc; docs/planning.md) read and write under their
transaction: container rows locked one by one (`FOR NO KEY UPDATE`, in the order the operation asks), the state a
container moves to, a replacement's row, a realloc's node and decision. A locked container is a typed
`ContainerRecord` (eru.store.queries; its JSON columns as JSON text); a realloc's node is an `OperationNode`
(eru.store.operations; `realloc_node`, read by `sql.node_resources` as the snapshot's rows are). The operations
capability on PostgreSQL (`store.operation_store`) runs these.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from eru.domain import Workload
from eru.store.operations import OperationNode
from eru.store.queries import ContainerRecord
from eru.store.transaction import Connection
from eru_allocator.store import sql

CONTAINER_COLUMNS = (
    "id, deploy_id, node, pod, workload, image, tenant, class, priority, allocation, resources, state, reason, "
    "labels, previous_allocation, replaces, created_at, updated_at, health"
)
LOCK_SQL = f"SELECT {CONTAINER_COLUMNS} FROM containers WHERE id = $1 FOR NO KEY UPDATE"
STOPPING_SQL = "UPDATE containers SET state = 'stopping' WHERE id = $1 AND state NOT IN ('removed', 'failed', 'lost')"
PENDING_REPLACEMENT_SQL = "SELECT id FROM containers WHERE replaces = $1 AND state IN ('planned', 'creating')"
POLICY_SQL = "SELECT policy FROM pods WHERE name = $1"
DEPLOY_REQUEST_SQL = "SELECT request FROM deploys WHERE id = $1"
PODS_OF_SQL = "SELECT id, pod FROM containers WHERE id = ANY($1::text[])"
NODE_SQL = f"SELECT {sql.NODE_COLUMNS} FROM {sql.NODES_WITH_STATUS} WHERE name = $1"
UPDATING_SQL = (
    "UPDATE containers SET state = 'updating', allocation = $2::jsonb, resources = $3::jsonb, "
    "previous_allocation = $4::jsonb WHERE id = $1"
)


def _text(value: Any) -> Any:
    return value if value is None or isinstance(value, str) else json.dumps(value)


def container_record(row: Any) -> ContainerRecord:
    """A `containers` row read with `CONTAINER_COLUMNS` as a typed record."""
    return ContainerRecord(
        row["id"],
        row["deploy_id"],
        row["node"],
        row["pod"],
        row["workload"],
        row["image"],
        row["tenant"],
        row["class"],
        int(row["priority"]),
        _text(row["allocation"]),
        _text(row["resources"]),
        row["state"],
        row["reason"],
        _text(row["labels"]),
        _text(row["previous_allocation"]),
        row["replaces"],
        row["created_at"],
        row["updated_at"],
        row["health"],
    )


async def lock_containers(conn: Connection, ids: Sequence[str]) -> list[ContainerRecord | None]:
    """The rows of containers `ids`, each locked in turn (None for an unknown id), in the order of `ids`."""
    records: list[ContainerRecord | None] = []
    for container_id in ids:
        row = await conn.fetchrow(LOCK_SQL, container_id)
        records.append(None if row is None else container_record(row))
    return records


async def mark_stopping(conn: Connection, ids: Sequence[str]) -> None:
    """Containers `ids` that still hold resources move to `stopping` (their node agents were asked to remove them)."""
    await conn.executemany(STOPPING_SQL, [(container_id,) for container_id in ids])


async def pending_replacement(conn: Connection, container_id: str) -> str | None:
    """The replacement of `container_id` not yet running, if any."""
    found: str | None = await conn.fetchval(PENDING_REPLACEMENT_SQL, container_id)
    return found


async def pod_policy(conn: Connection, pod: str) -> dict[str, Any]:
    """The pod's policy object ({} when none)."""
    stored = await conn.fetchval(POLICY_SQL, pod)
    policy: dict[str, Any] = json.loads(stored) if isinstance(stored, str) else (stored or {})
    return policy


async def deploy_request(conn: Connection, deploy_id: str) -> dict[str, Any] | None:
    """The deploy request (JSON) of deploy `deploy_id`, None when it is gone."""
    request = await conn.fetchval(DEPLOY_REQUEST_SQL, deploy_id)
    if request is None:
        return None
    found: dict[str, Any] = json.loads(request) if isinstance(request, str) else request
    return found


async def insert_replacement(conn: Connection, container_id: str, old: ContainerRecord, workload: Workload) -> None:
    """The row of `container_id`, planned to replace `old` on its node with its allocation and requirement."""
    await conn.execute(
        sql.INSERT_CONTAINER_SQL,
        container_id,
        old.deploy_id,
        old.node,
        old.pod,
        workload.name,
        workload.image,
        workload.tenant,
        workload.priority_class,
        workload.priority,
        old.allocation,
        old.resources,
        "planned",
        json.dumps(workload.labels),
        old.id,
    )


async def pods_of(conn: Connection, ids: Sequence[str]) -> dict[str, str]:
    """Container id → its pod, for the known ones of `ids`."""
    return {row["id"]: row["pod"] for row in await conn.fetch(PODS_OF_SQL, list(ids))}


async def realloc_node(conn: Connection, name: str) -> OperationNode | None:
    """Node `name` as a realloc reads it; None when unknown."""
    row = await conn.fetchrow(NODE_SQL, name)
    if row is None:
        return None
    conditions = row["conditions"]
    return OperationNode(
        sql.node_resources(row), str(row["pod"]), json.loads(conditions) if isinstance(conditions, str) else conditions
    )


async def record_decision(conn: Connection, decision_id: str, kind: str, problem: str, output: str) -> None:
    """A `decisions` row: the input as an `eru plan` problem and the output, both JSON text."""
    await conn.execute(sql.INSERT_DECISION_SQL, decision_id, kind, problem, output)


async def mark_updating(conn: Connection, container_id: str, allocation: str, resources: str, previous: str) -> None:
    """Container `container_id` moves to `updating` with its new allocation and requirement (JSON text), the old
    ones kept in `previous_allocation` until the node agent confirms."""
    await conn.execute(UPDATING_SQL, container_id, allocation, resources, previous)
