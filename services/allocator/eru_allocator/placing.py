"""Talking to the distributor, and the records of a placement: the decision's input and the wire allocation."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from nats.errors import NoRespondersError as NatsNoResponders
from nats.errors import TimeoutError as NatsTimeout

from eru.bus import Envelope, RemoteError, RequestTimeout, Retryable
from eru.bus.codec import MSGPACK, decode_value, encode_value
from eru.bus.codec import validate as validate_model
from eru.bus.envelope import H_CONTENT_TYPE
from eru.bus.errors import NoResponders
from eru.bus.subjects import DISTRIBUTOR_PLACE
from eru.domain import Allocation, DeployRequest, PlaceReply
from eru.errors import InvalidInput, PlanningFailure
from eru.planning import ContainerPlan, NodeResources, NormalizedRequest, PlanningConfig
from eru.planning.resources import node_to_mapping


async def place_request(nc: Any, reply_within: float, place: dict[str, Any], envelope: Envelope) -> PlaceReply:
    """One request/reply with the distributor over nats-py's shared reply subscription (no per-request inbox
    subscription, no flush round trip: the allocator sends one per deploy request, inside the pod lock)."""
    headers = {**envelope.to_headers(), H_CONTENT_TYPE: MSGPACK}
    try:
        msg = await nc.request(DISTRIBUTOR_PLACE, encode_value(place), timeout=reply_within, headers=headers)
    except NatsNoResponders:
        raise NoResponders(f"nobody serves {DISTRIBUTOR_PLACE}", subject=DISTRIBUTOR_PLACE) from None
    except (NatsTimeout, TimeoutError):
        raise RequestTimeout(
            f"no reply from {DISTRIBUTOR_PLACE} within {reply_within:g}s", subject=DISTRIBUTOR_PLACE
        ) from None
    value = decode_value(msg.data, MSGPACK)
    if isinstance(value, dict) and value.get("status") == "error":
        details = value.get("details")
        raise RemoteError(
            str(value.get("code") or "error"),
            str(value.get("message") or "error"),
            details if isinstance(details, dict) else {},
        )
    return validate_model(value, PlaceReply)


async def ask_distributor(
    nc: Any,
    source: str,
    reply_within: float,
    req: DeployRequest,
    slots: Sequence[Any],
    envelope: Envelope,
    options: dict[str, Any],
) -> dict[str, int]:
    """The distributor's placement for `req` over `slots` (docs/placement-modes.md); `PlanningFailure` when the mode
    cannot place it, `InvalidInput` for what the distributor finds malformed, `Retryable` when no distributor
    answers."""
    # The wire form of a `PlaceRequest`, built directly: the slots come from the planning core and are valid, and a
    # deploy request sends one of these per request inside the pod lock (the distributor validates what it receives).
    place = {
        "mode": req.mode,
        "count": req.count,
        "nodes_limit": req.nodes_limit,
        "options": options,
        "slots": [
            {
                "name": s.name,
                "capacity": s.capacity,
                "count": s.count,
                "usage": s.usage,
                "rate": s.rate,
                "labels": dict(s.labels),
            }
            for s in slots
        ],
    }
    try:
        reply = await place_request(nc, reply_within, place, envelope.caused("eru.distributor.place", source))
    except (RequestTimeout, NoResponders) as error:
        raise Retryable(f"distributor unavailable: {error.message}", delay=1.0) from None
    except RemoteError as error:
        if error.code == "invalid_input":
            field = str(error.details.get("field") or "mode")
            raise InvalidInput(field, error.message.removeprefix(f"{field}: ")) from None
        if error.code in ("handler_error", "internal", "unavailable", "store_unavailable"):
            raise Retryable(f"distributor failed: {error.message}", delay=1.0) from None
        details = {k: v for k, v in error.details.items() if k not in ("code", "message")}
        raise PlanningFailure(error.message, code=error.code, **details) from None
    return dict(reply.placements)


def decision_input(
    config: PlanningConfig,
    req: DeployRequest,
    nodes: list[NodeResources],
    counts: dict[str, int],
    fragments: dict[str, tuple[NodeResources, str]] | None = None,
    options: dict[str, Any] | None = None,
    withheld: dict[str, Any] | None = None,
) -> str:
    """The decision's full input as an `eru plan` problem (docs/planning.md, JSON text), so `eru plan` can re-run it.

    `withheld` (node → {cpu cores, memory bytes}): other tenants' unused reservations the request may not use.

    `fragments` caches each node's JSON between the requests of one batch: only the nodes a request charged change.
    """
    cache = fragments if fragments is not None else {}
    parts = []
    for node in nodes:
        cached = cache.get(node.name)
        if cached is None or cached[0] is not node:
            text = json.dumps({**node_to_mapping(node), **batch_fields(node, config)})
            cached = cache[node.name] = (node, text[:-1])
        parts.append(f'{cached[1]}, "count": {counts.get(node.name, 0)}}}')
    head: dict[str, Any] = {
        "kind": "deploy",
        "config": {
            "share_base": config.share_base,
            "max_fragment_cores": config.max_fragment_cores,
            "max_deploy_count": config.max_deploy_count,
        },
        "mode": req.mode,
        "count": req.count,
        "nodes_limit": req.nodes_limit,
        "request": req.workload.resources.model_dump(mode="json"),
    }
    if req.workload.priority_class == "batch":
        head["priority_class"] = "batch"  # bounded by the nodes' `batch` allowances (docs/colocation.md)
    if options:
        head["options"] = options
    if withheld:
        head["withheld"] = withheld
    return json.dumps(head)[:-1] + ', "nodes": [' + ", ".join(parts) + "]}"


def batch_fields(node: NodeResources, config: PlanningConfig) -> dict[str, Any]:
    """The node's batch allowance in `eru plan` form (`{"batch": {"cpu": cores, "memory": bytes}}`), if it has one."""
    allowance: dict[str, Any] = {}
    if node.batch_cpu is not None:
        allowance["cpu"] = node.batch_cpu / config.share_base
    if node.batch_memory is not None:
        allowance["memory"] = node.batch_memory
    return {"batch": allowance} if allowance else {}


def allocation_of(plan: ContainerPlan, normalized: NormalizedRequest, config: PlanningConfig) -> Allocation:
    """The wire allocation of one planned instance (cpuset, shares, quota and memory for the node agent)."""
    return Allocation(
        cpu_map=dict(plan.cpu_map),
        numa_node=plan.numa_node,
        memory=plan.memory,
        share_base=config.share_base,
        cpu_bind=normalized.cpu_bind,
        cpu_limit=normalized.cpu_limit / config.share_base,
        memory_limit=normalized.memory_limit,
        memory_soft=normalized.memory_soft,
    )
