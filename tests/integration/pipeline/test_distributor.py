"""The distributor over a real nats-server: two replicas in one queue group, modes, and clear errors."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from eru.bus import RemoteError, request
from eru.bus.codec import encode_value
from eru.bus.connection import connect
from eru.bus.subjects import DISTRIBUTOR_PLACE, DISTRIBUTOR_PLACE_BATCH
from eru.domain import PlaceBatchReply, PlaceBatchRequest, PlacementSlot, PlaceReply, PlaceRequest
from eru_distributor.app import start_distributor


def slots(capacities: dict[str, int], counts: dict[str, int] | None = None) -> list[PlacementSlot]:
    return [PlacementSlot(name=n, capacity=c, count=(counts or {}).get(n, 0)) for n, c in capacities.items()]


async def place(nc: Any, req: PlaceRequest) -> dict[str, int]:
    reply = await request(nc, DISTRIBUTOR_PLACE, req, PlaceReply, timeout=5)
    return reply.placements


async def test_two_replicas_share_requests_and_answer_each_mode(nats_url: str, nc: Any) -> None:
    replicas = [await connect(nats_url, name=f"distributor-{i}") for i in range(2)]
    servers = [await start_distributor(c, source=f"distributor/r{i}") for i, c in enumerate(replicas)]
    try:
        each = PlaceRequest(mode="each", count=3, slots=slots({"A": 5, "B": 3, "C": 7, "D": 4}))
        answers = await asyncio.gather(*(place(nc, each) for _ in range(40)))
        assert all(a == {"A": 3, "B": 3, "C": 3, "D": 3} for a in answers)
        assert all(s.served > 0 for s in servers), [s.served for s in servers]
        assert sum(s.served for s in servers) == 40

        only_big = PlaceRequest(mode="each", count=5, slots=slots({"A": 5, "B": 3, "C": 7, "D": 4}))
        assert await place(nc, only_big) == {"A": 5, "C": 5}

        fill = PlaceRequest(
            mode="fill",
            count=4,
            slots=slots({"A": 10, "B": 5, "C": 7, "D": 9}, {"A": 2, "B": 3, "C": 4, "D": 5}),
        )
        assert await place(nc, fill) == {"A": 2, "B": 1}

        auto = PlaceRequest(
            mode="auto",
            count=4,
            slots=slots({"A": 10, "B": 13, "C": 7, "D": 2}, {"A": 3, "B": 1, "C": 5, "D": 4}),
        )
        assert await place(nc, auto) == {"A": 1, "B": 3}
    finally:
        for server in servers:
            await server.stop()
        for c in replicas:
            await c.close()


async def test_invalid_requests_get_errors_naming_the_problem(nats_url: str, nc: Any) -> None:
    replica = await connect(nats_url, name="distributor")
    server = await start_distributor(replica, source="distributor/r1")
    try:
        with pytest.raises(RemoteError) as unknown:
            await place(nc, PlaceRequest(mode="spread", count=1, slots=slots({"A": 1})))
        assert unknown.value.code == "invalid_input"
        assert "mode" in unknown.value.message
        assert "spread" in unknown.value.message

        with pytest.raises(RemoteError) as duplicate:
            await place(nc, PlaceRequest(mode="auto", count=1, slots=slots({"A": 1}) + slots({"A": 2})))
        assert "slots[1].name" in duplicate.value.message

        with pytest.raises(RemoteError) as short:
            await place(nc, PlaceRequest(mode="each", count=8, slots=slots({"A": 5, "B": 3})))
        assert short.value.code != "invalid_input"
        assert "8" in short.value.message

        reply = await nc.request(DISTRIBUTOR_PLACE, b"\xc1 not msgpack", timeout=5)
        assert b"invalid_input" in reply.data
        assert b"body" in reply.data

        # the replica keeps serving after every bad request
        assert await place(nc, PlaceRequest(mode="auto", count=2, slots=slots({"A": 1, "B": 1}))) == {"A": 1, "B": 1}
    finally:
        await server.stop()
        await replica.close()


async def test_a_batch_answers_every_ask_on_its_own(nats_url: str, nc: Any) -> None:
    replica = await connect(nats_url, name="distributor")
    server = await start_distributor(replica, source="distributor/r1")
    try:
        batch = PlaceBatchRequest(
            asks=[
                PlaceRequest(mode="each", count=3, slots=slots({"A": 5, "B": 3, "C": 7})),
                PlaceRequest(mode="spread", count=1, slots=slots({"A": 1})),
                PlaceRequest(mode="auto", count=1, slots=slots({"A": 1}) + slots({"A": 2})),
                PlaceRequest(mode="each", count=8, slots=slots({"A": 5, "B": 3})),
                PlaceRequest(mode="auto", count=2, slots=slots({"A": 1, "B": 1})),
            ]
        )
        reply = await request(nc, DISTRIBUTOR_PLACE_BATCH, batch, PlaceBatchReply, timeout=5)
        first, unknown, duplicate, short, last = reply.results
        assert first.placements == {"A": 3, "B": 3, "C": 3}
        assert first.error is None
        assert unknown.error is not None
        assert unknown.error["code"] == "invalid_input"
        assert "spread" in unknown.error["message"]
        assert duplicate.error is not None
        assert "asks[2].slots[1].name" in duplicate.error["message"]
        assert short.error is not None
        assert short.error["code"] != "invalid_input"
        assert "8" in short.error["message"]
        assert last.placements == {"A": 1, "B": 1}

        empty = await nc.request(DISTRIBUTOR_PLACE_BATCH, encode_value({"asks": []}), timeout=5)
        assert b"invalid_input" in empty.data
        assert b"asks" in empty.data
    finally:
        await server.stop()
        await replica.close()
