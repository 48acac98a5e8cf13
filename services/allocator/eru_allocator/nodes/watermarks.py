"""Watermark overrides (docs/colocation.md "Watermarks set live"): `eru.allocator.watermarks` sets or clears a node's
or a pod's overrides, stored in `watermark_overrides` (migration 0180) and published through the outbox on
`eru.watermarks.<scope>.<name>` for the eviction replicas; `query watermarks` lists them (a replica's resync).

A change is validated as a whole, with every layer it combines with (the eviction settings this replica was given,
the pod's override, the overrides of the pod's nodes), under the pod's lock so two changes to one pod never combine
into an invalid configuration; a refusal names the field and the rule and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg
import structlog

from eru.bus import new_envelope
from eru.bus.subjects import watermarks as watermarks_subject
from eru.colocation.overrides import (
    apply_change,
    check_key,
    check_override,
    describe,
    effective_config,
)
from eru.domain.messages import OperationReply, WatermarkOverride, WatermarkRequest
from eru.errors import InvalidInput, NotFound
from eru.store import lock_pod, transaction
from eru.store.transaction import Connection
from eru_allocator.delivery.outbox import queue
from eru_allocator.store import watermark_overrides as rows

log = structlog.get_logger()


async def _check(
    conn: Connection, environment: Mapping[str, Any], req: WatermarkRequest, pod: str, new: dict[str, int]
) -> None:
    """Every node configuration the change touches, validated (`InvalidInput` naming the layer and field)."""
    if req.scope == "node":
        effective_config(environment, req.name, pod, await rows.override(conn, "pod", pod), new)
        return
    effective_config(environment, "-", pod, new, None)  # a node of the pod without an override of its own
    for node in await rows.pod_node_overrides(conn, pod):
        effective_config(environment, node.node, pod, new, node.settings or {})


async def set_watermarks(
    pool: asyncpg.Pool, environment: Mapping[str, Any], source: str, req: WatermarkRequest
) -> OperationReply:
    """Apply one change to a node's or a pod's override; all or nothing."""
    values = check_override(req.set, "set")
    for key in req.clear:
        check_key(key, f"clear.{key}")
    both = sorted(set(values) & set(req.clear))
    if both:
        raise InvalidInput(f"set.{both[0]}", "both set and cleared in one request")
    async with transaction(pool) as conn:
        pod = await rows.pod_of(conn, req.scope, req.name)
        if pod is None:
            raise NotFound(req.scope, f"unknown {req.scope} {req.name!r}")
        await lock_pod(conn, pod)
        current = await rows.override(conn, req.scope, req.name, lock=True)
        new = apply_change(current, values, req.clear, req.clear_all)
        await _check(conn, environment, req, pod, new)
        version = await rows.put_override(conn, req.scope, req.name, new)
        override = WatermarkOverride(scope=req.scope, name=req.name, settings=new, version=version)
        envelope = new_envelope(
            "eru.watermarks.changed", source, message_id=f"watermarks-{req.scope}-{req.name}-{version}"
        )
        await queue(conn, watermarks_subject(req.scope, req.name), override, envelope)
    log.info("watermarks.set", scope=req.scope, name=req.name, settings=new, version=version)
    return OperationReply(
        message=f"{req.scope} {req.name} watermarks: {describe(new)}",
        rows=[override.model_dump()],
    )


async def list_overrides(conn: Connection) -> list[dict[str, Any]]:
    """Every stored override (`WatermarkOverride` rows), cleared ones included (their version matters)."""
    return [
        WatermarkOverride(scope=row.scope, name=row.name, settings=row.settings, version=row.version).model_dump()
        for row in await rows.all_overrides(conn)
    ]
