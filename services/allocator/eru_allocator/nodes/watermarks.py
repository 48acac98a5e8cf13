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
from eru.store.protocol import OutboxMessage
from eru.store.watermarks import OverrideLayers, StoredOverride, WatermarkStore

log = structlog.get_logger()


def _check(environment: Mapping[str, Any], req: WatermarkRequest, layers: OverrideLayers, new: dict[str, int]) -> None:
    """Every node configuration the change touches, validated (`InvalidInput` naming the layer and field)."""
    if req.scope == "node":
        effective_config(environment, req.name, layers.pod, layers.pod_override, new)
        return
    effective_config(environment, "-", layers.pod, new, None)  # a node of the pod without an override of its own
    for node in layers.node_overrides:
        effective_config(environment, node.node, layers.pod, new, node.settings or {})


def _override(stored: StoredOverride) -> WatermarkOverride:
    return WatermarkOverride(scope=stored.scope, name=stored.name, settings=stored.settings, version=stored.version)


async def set_watermarks(
    store: WatermarkStore, environment: Mapping[str, Any], source: str, req: WatermarkRequest
) -> OperationReply:
    """Apply one change to a node's or a pod's override; all or nothing."""
    values = check_override(req.set, "set")
    for key in req.clear:
        check_key(key, f"clear.{key}")
    both = sorted(set(values) & set(req.clear))
    if both:
        raise InvalidInput(f"set.{both[0]}", "both set and cleared in one request")

    def change(layers: OverrideLayers) -> dict[str, int]:
        new = apply_change(layers.current, values, req.clear, req.clear_all)
        _check(environment, req, layers, new)
        return new

    def message(stored: StoredOverride) -> OutboxMessage:
        envelope = new_envelope(
            "eru.watermarks.changed", source, message_id=f"watermarks-{req.scope}-{req.name}-{stored.version}"
        )
        return OutboxMessage(watermarks_subject(req.scope, req.name), _override(stored), envelope)

    stored = await store.change_override(req.scope, req.name, change, message)
    if stored is None:
        raise NotFound(req.scope, f"unknown {req.scope} {req.name!r}")
    log.info("watermarks.set", scope=req.scope, name=req.name, settings=stored.settings, version=stored.version)
    return OperationReply(
        message=f"{req.scope} {req.name} watermarks: {describe(stored.settings)}",
        rows=[_override(stored).model_dump()],
    )


async def stored_overrides(store: WatermarkStore) -> list[dict[str, Any]]:
    """Every stored override (`WatermarkOverride` rows), cleared ones included (their version matters)."""
    return [_override(stored).model_dump() for stored in await store.overrides()]
