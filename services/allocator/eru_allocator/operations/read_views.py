"""Read-only views for operators (`eru.allocator.query`): the newest deploys with their progress, and one recorded
decision with its whole input (what the web console and `eru replay` without a database connection read)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from eru.decision_answer import full_answer
from eru.errors import InvalidInput, NotFound
from eru.store.queries import QueryStore


async def deploy_rows(
    store: QueryStore,
    pod: str | None,
    limit: int,
    *,
    before: tuple[datetime, str] | None = None,
    tenant: str | None = None,
) -> list[dict[str, Any]]:
    """The newest `limit` deploys (of `pod`, or all; of `tenant` and its groups, or every tenant's) older than
    `before` (creation time, id: a page's cursor), newest first: status, workload, count, the decision id and the
    deploy's containers counted by state (`states`: {"running": 3, "creating": 1})."""
    return [
        {
            "id": view.id,
            "request_id": view.request_id,
            "pod": view.pod,
            "tenant": view.tenant,
            "status": view.status,
            "created_at": view.created_at.isoformat(),
            "updated_at": None if view.updated_at is None else view.updated_at.isoformat(),
            "decision_id": view.decision_id,
            "workload": view.workload,
            "image": view.image,
            "class": view.priority_class,
            "count": view.count,
            "error": view.error,
            "states": view.states,
        }
        for view in await store.deploy_views(pod, limit, before, tenant)
    ]


async def decision_view(store: QueryStore, decision_id: str | None) -> dict[str, Any]:
    """One recorded decision: `{"id", "kind", "input", "output", "created_at"}`, a compact input's snapshot put back
    (docs/replay.md); `InvalidInput` naming `decision_id` when it is missing, `NotFound` naming it when it is unknown
    or retention dropped it (docs/operations.md "Retention")."""
    if not decision_id:
        raise InvalidInput("decision_id", "needed to show a decision")
    row = await store.decision(decision_id)
    if row is None:
        gone = await store.decision_expired_at(decision_id)
        if gone is not None:
            raise NotFound("decision_id", f"decision {decision_id!r} expired at {gone.isoformat()} (retention)")
        raise NotFound("decision_id", f"unknown decision {decision_id!r}")
    found = {
        "id": row.id,
        "kind": row.kind,
        "input": row.input,
        "output": row.output,
        "created_at": row.created_at.isoformat(),
    }
    if isinstance(found.get("input"), Mapping):  # a compact record: its batch's snapshot put back (docs/replay.md)
        found["input"] = await store.full_input(found["input"])
        if isinstance(row.output, Mapping):  # and every node's capacity in its answer
            found["output"] = full_answer(found["input"], row.output)
    return found
