"""The distributor: answers placement requests in a queue group, any number of replicas.

A thin shell over `eru.planning.distribute` (docs/placement-modes.md): `eru.distributor.place` decides one request
(its slots in the order given; the allocator sends nodes sorted by name), `eru.distributor.place_batch` every request
of an allocator batch at once, each on its own (docs/pipeline.md, "Performance"). An invalid request (unknown mode,
duplicate node, a body that does not decode) is answered with an error naming the field; a request that cannot be
placed is answered with the mode's `PlanningFailure` and its numbers; in a batch, each ask gets its own outcome.
"""

from __future__ import annotations

import structlog
from nats.aio.client import Client

from eru.bus import Envelope, Server, serve
from eru.bus.subjects import DISTRIBUTOR_PLACE, DISTRIBUTOR_PLACE_BATCH
from eru.domain import PlaceBatchReply, PlaceBatchRequest, PlaceReply, PlaceRequest
from eru.planning.distribute import decide, decide_many
from eru.service import ServiceContext

log = structlog.get_logger()

QUEUE_GROUP = "eru-distributor"

__all__ = ["QUEUE_GROUP", "Distributor", "decide", "service_main", "start_distributor"]


class Distributor:
    """The running responders of one replica."""

    def __init__(self, servers: list[Server]) -> None:
        self.servers = servers

    @property
    def served(self) -> int:
        """Requests answered so far (a batch counts once)."""
        return sum(server.served for server in self.servers)

    async def stop(self) -> None:
        """Stop taking requests, finish those in flight."""
        for server in self.servers:
            await server.stop()


async def start_distributor(nc: Client, *, source: str, concurrency: int = 32) -> Distributor:
    """Serve `eru.distributor.place` and `eru.distributor.place_batch` in the distributor queue group until
    `stop()`."""

    async def handle(request: PlaceRequest, envelope: Envelope) -> PlaceReply:
        reply = decide(request)
        log.debug("distributor.placed", mode=request.mode, count=request.count, placements=len(reply.placements))
        return reply

    async def handle_batch(batch: PlaceBatchRequest, envelope: Envelope) -> PlaceBatchReply:
        reply = decide_many(batch)
        log.debug("distributor.placed_batch", asks=len(batch.asks))
        return reply

    servers = [
        await serve(
            nc, DISTRIBUTOR_PLACE, PlaceRequest, handle, queue=QUEUE_GROUP, source=source, concurrency=concurrency
        ),
        await serve(
            nc,
            DISTRIBUTOR_PLACE_BATCH,
            PlaceBatchRequest,
            handle_batch,
            queue=QUEUE_GROUP,
            source=source,
            concurrency=concurrency,
        ),
    ]
    return Distributor(servers)


async def service_main(ctx: ServiceContext) -> None:
    """Serve placements until the runner asks to stop, then finish the requests in flight."""
    distributor = await start_distributor(ctx.nc, source=f"distributor/{ctx.settings.replica}")
    ctx.ready.set()
    try:
        await ctx.stopping.wait()
    finally:
        await distributor.stop()
        ctx.load["served"] = float(distributor.served)
