"""The distributor: answers placement requests (`eru.distributor.place`) in a queue group, any number of replicas.

A thin shell over `eru.planning.modes.place` (docs/placement-modes.md): the request's slots become `NodeSlot`s in the
order given (the allocator sends nodes sorted by name), the mode decides, the reply lists the nodes that get instances.
An invalid request (unknown mode, duplicate node, a body that does not decode) is answered with an error naming the
field; a request that cannot be placed is answered with the mode's `PlanningFailure` and its numbers.
"""

from __future__ import annotations

from typing import Any

import structlog

from eru.bus import Envelope, Server, serve
from eru.bus.subjects import DISTRIBUTOR_PLACE
from eru.domain import PlaceReply, PlaceRequest
from eru.errors import InvalidInput
from eru.planning.modes import NodeSlot, PlacementRequest, place
from eru.service import ServiceContext

log = structlog.get_logger()

QUEUE_GROUP = "eru-distributor"


def decide(request: PlaceRequest) -> PlaceReply:
    """The placement for one request (pure): per-node new instances, only nodes that get some."""
    seen: set[str] = set()
    slots: list[NodeSlot] = []
    for index, slot in enumerate(request.slots):
        if slot.name in seen:
            raise InvalidInput(f"slots[{index}].name", f"node {slot.name!r} appears more than once")
        seen.add(slot.name)
        slots.append(
            NodeSlot(
                name=slot.name,
                capacity=slot.capacity,
                count=slot.count,
                usage=slot.usage,
                rate=slot.rate,
                labels=dict(slot.labels),
            )
        )
    wanted = PlacementRequest(count=request.count, nodes_limit=request.nodes_limit, options=dict(request.options))
    placements = place(request.mode, slots, wanted)
    return PlaceReply(placements={name: n for name, n in placements.items() if n > 0})


async def start_distributor(nc: Any, *, source: str, concurrency: int = 32) -> Server:
    """Serve `eru.distributor.place` in the distributor queue group until `server.stop()`."""

    async def handle(request: PlaceRequest, envelope: Envelope) -> PlaceReply:
        reply = decide(request)
        log.debug("distributor.placed", mode=request.mode, count=request.count, placements=len(reply.placements))
        return reply

    return await serve(
        nc, DISTRIBUTOR_PLACE, PlaceRequest, handle, queue=QUEUE_GROUP, source=source, concurrency=concurrency
    )


async def service_main(ctx: ServiceContext) -> None:
    """Serve placements until the runner asks to stop, then finish the requests in flight."""
    server = await start_distributor(ctx.nc, source=f"distributor/{ctx.settings.replica}")
    ctx.ready.set()
    try:
        await ctx.stopping.wait()
    finally:
        await server.stop()
        ctx.load["served"] = float(server.served)
