"""Talking to the distributor, and the records of a placement: the decision's input and the wire allocation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eru.bus import Envelope, RemoteError, RequestTimeout, Retryable
from eru.bus.codec import MSGPACK, decode_value, encode_value
from eru.bus.codec import validate as validate_model
from eru.bus.envelope import H_CONTENT_TYPE
from eru.bus.errors import NoResponders
from eru.bus.protocol import Bus
from eru.bus.subjects import DISTRIBUTOR_PLACE
from eru.domain import Allocation, DeployRequest, PlaceReply
from eru.errors import InvalidInput, PlanningFailure
from eru.planning import ContainerPlan, NormalizedRequest, PlanningConfig


async def place_request(bus: Bus, reply_within: float, place: dict[str, Any], envelope: Envelope) -> PlaceReply:
    """One request/reply with the distributor (over nats-py's shared reply subscription in service: no per-request
    inbox subscription, no flush round trip). `NoResponders` / `RequestTimeout` come from the bus seam."""
    headers = {**envelope.to_headers(), H_CONTENT_TYPE: MSGPACK}
    msg = await bus.request(DISTRIBUTOR_PLACE, encode_value(place), reply_within=reply_within, headers=headers)
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
    bus: Bus,
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
        reply = await place_request(bus, reply_within, place, envelope.caused("eru.distributor.place", source))
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
