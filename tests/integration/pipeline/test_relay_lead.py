"""Allocator replicas share one outbox (docs/replicas.md "One replica relays"), on a real PostgreSQL and nats-server:
a relay that does not lead relays one batch per poll and is not woken by commits, the leading relay takes every
commit at once, and between them every row is published exactly once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from eru.bus.streams import DEPLOY, provision_streams
from eru.store import add_to_outbox, transaction
from eru_allocator.delivery.outbox import STANDBY_BATCH, run_relay
from eru_allocator.store.delivery_store import PgDelivery


async def eventually(condition: Callable[[], Any], expect: Any = True, timeout: float = 60.0) -> None:  # noqa: ASYNC109
    """Wait until `condition()` (awaited when it is a coroutine) equals `expect`; fail clearly after `timeout`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = condition()
        if isinstance(value, Awaitable):
            value = await value
        if value == expect:
            return
        assert loop.time() < deadline, f"still {value!r}, expected {expect!r} after {timeout} s"
        await asyncio.sleep(0.02)


class Counting:
    """The JetStream context of one relay, counting what it published."""

    def __init__(self, js: Any) -> None:
        self.js = js
        self.published: list[str] = []

    async def publish_async(self, subject: str, body: bytes, headers: dict[str, str]) -> Any:
        self.published.append(headers["Nats-Msg-Id"])
        return await self.js.publish_async(subject, body, headers=headers)


async def fill(pool: asyncpg.Pool, first: int, count: int) -> None:
    async with transaction(pool) as conn:
        for i in range(first, first + count):
            event_id = f"evt-{i:04d}"
            await add_to_outbox(conn, event_id=event_id, subject=f"eru.deploy.d{i}.accepted", body=b"{}")


async def unpublished(pool: asyncpg.Pool) -> int:
    return int(await pool.fetchval("SELECT count(*) FROM outbox WHERE published_at IS NULL"))


async def test_only_the_lead_relay_wakes_on_commits_and_each_row_is_published_once(
    store_pool: asyncpg.Pool, js: Any
) -> None:
    await provision_streams(js)
    stopping = asyncio.Event()
    await fill(store_pool, 0, 80)
    follower, lead = Counting(js), Counting(js)
    tasks = [
        asyncio.create_task(
            run_relay(PgDelivery(store_pool), follower, stopping, batch=500, poll_seconds=600, eager=lambda: False)
        )
    ]
    try:
        # standing by: at most STANDBY_BATCH rows at start, then it waits for the poll
        await eventually(lambda: len(follower.published) == STANDBY_BATCH)
        await fill(store_pool, 80, 10)  # a commit: its NOTIFY does not wake the follower
        leading = True
        tasks.append(
            asyncio.create_task(
                run_relay(PgDelivery(store_pool), lead, stopping, batch=5, poll_seconds=1.0, eager=lambda: leading)
            )
        )
        await eventually(lambda: unpublished(store_pool), expect=0)
        await fill(store_pool, 90, 7)
        await eventually(lambda: unpublished(store_pool), expect=0)
        assert len(follower.published) == STANDBY_BATCH
        assert len(lead.published) == 97 - STANDBY_BATCH
        assert sorted(follower.published + lead.published) == [f"evt-{i:04d}" for i in range(97)]
        info = await js.stream_info(DEPLOY)
        assert info.state.messages == 97
    finally:
        stopping.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
