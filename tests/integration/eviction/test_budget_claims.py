"""Eviction budgets shared by replicas (docs/colocation.md "Eviction budgets"): compare-and-set claims on a real
JetStream KV bucket never admit more than the budget, however the replicas interleave."""

from __future__ import annotations

import asyncio

import pytest

from eru.bus.connection import connect
from eru_eviction.budgets import BudgetBook

pytestmark = pytest.mark.timeout(60)


async def test_two_replicas_claiming_at_once_share_one_budget(nats_url: str) -> None:
    connections = [await connect(nats_url, name=f"eviction-r{i}") for i in range(2)]
    try:
        books = [BudgetBook(nc.jetstream()) for nc in connections]
        for book in books:
            await book.start()
        ids = [[f"r{r}-c{i}" for i in range(5)] for r in range(2)]
        claims = [books[r].claim("p1", "web-batch", 3, 600.0, ids[r], 1000.0) for r in range(2) for _ in range(3)]
        admitted = {cid for result in await asyncio.gather(*claims) for cid in result}
        assert len(admitted) == 3  # 3 per 10 minutes, across both replicas
        await books[0].refresh()
        assert sorted(books[0].history("p1")["web-batch"]) == [1000.0] * 3
        # a repeat of an admitted claim is admitted again (idempotent), nothing new fits inside the window
        again = await books[1].claim("p1", "web-batch", 3, 600.0, sorted(admitted), 1100.0)
        assert set(again) == admitted
        assert await books[1].claim("p1", "web-batch", 3, 600.0, ["late"], 1500.0) == []
        # once the window has passed, the budget is there again
        assert await books[1].claim("p1", "web-batch", 3, 600.0, ["later"], 1600.5) == ["later"]
        assert books[1].history("p2") == {}
    finally:
        for nc in connections:
            await nc.close()


async def test_the_budget_bucket_gets_a_byte_cap_also_when_it_was_made_without_one(nats_url: str) -> None:
    """Every stream eru keeps has a byte cap (docs/operations.md "Retention"), the budgets' KV stream included; a bucket
    made by an older eru without one is given it in place, its keys kept."""
    from nats.js import api

    from eru_eviction.budgets import BUCKET, MAX_BYTES

    nc = await connect(nats_url, name="eviction-old")
    try:
        js = nc.jetstream()
        old = await js.create_key_value(config=api.KeyValueConfig(bucket=BUCKET, history=1, ttl=86400.0))
        await old.put("p1.web-batch", b'{"evictions": [[1000.0, "c-1"]]}')
        assert (await js.stream_info(f"KV_{BUCKET}")).config.max_bytes in (None, -1)
        book = BudgetBook(js)
        await book.start()
        assert (await js.stream_info(f"KV_{BUCKET}")).config.max_bytes == MAX_BYTES
        assert book.history("p1") == {"web-batch": [1000.0]}
        fresh = await connect(nats_url, name="eviction-new")
        try:
            await BudgetBook(fresh.jetstream()).start()  # a second replica starting finds it capped already
            assert (await js.stream_info(f"KV_{BUCKET}")).config.max_bytes == MAX_BYTES
        finally:
            await fresh.close()
    finally:
        await nc.close()
