"""Publishing after the commit (eru_allocator.delivery.publisher, migration 0150) on a real PostgreSQL and nats-server:
held rows wake no relay and are not claimed while held; the committing process publishes them in order with the relay's
message ids and tenant copies and marks them; a process that died before publishing leaves them to a relay once the
hold has passed, and JetStream keeps one copy of a message published by both; a failed publish hands the rows to the
relays at once."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import nats
from pipeline_harness import ScriptedPipeline

from eru.bus import new_envelope
from eru.bus.protocol import NatsBus
from eru.bus.streams import DEPLOY, provision_streams
from eru.domain import DeployEvent
from eru.store import OUTBOX_CHANNEL, transaction
from eru.store.protocol import OutboxMessage
from eru_allocator.delivery.outbox import queue_columns, queue_many, relay_once
from eru_allocator.delivery.publisher import CommittedPublisher
from eru_allocator.store.delivery_store import PgDelivery

# the outbox part of records.INSERT_BATCH_ROWS_SQL / events.WRITE_SQL: rows inserted with a hold of $5 seconds
HELD_SQL = """
INSERT INTO outbox (event_id, subject, headers, body, held_until)
SELECT event_id, subject, headers::jsonb, body, clock_timestamp() + make_interval(secs => $5::float8)
  FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[])
       WITH ORDINALITY AS q (event_id, subject, headers, body, n)
 ORDER BY n
"""


def events(*pairs: tuple[str, str]) -> list[OutboxMessage]:
    return [
        OutboxMessage(
            f"eru.deploy.{deploy_id}.{kind}", DeployEvent(deploy_id=deploy_id, kind=kind), new_envelope("e", "t")
        )
        for deploy_id, kind in pairs
    ]


async def insert_held(pool: asyncpg.Pool, messages: list[OutboxMessage], hold: float | None) -> None:
    async with transaction(pool) as conn:
        await conn.execute(HELD_SQL, *queue_columns(messages), hold)


async def stored(js: Any, count: int) -> list[tuple[str, str]]:
    """(subject, Nats-Msg-Id) of the deploy events stored, checking there are exactly `count`."""
    subscription = await js.subscribe("eru.deploy.*.*", ordered_consumer=True)
    found: list[tuple[str, str]] = []
    async with asyncio.timeout(30):
        while len(found) < count:
            msg = await subscription.next_msg(timeout=30)
            found.append((msg.subject, msg.headers["Nats-Msg-Id"]))
    info = await js.stream_info(DEPLOY)
    assert info.state.messages == count  # nothing stored twice
    await subscription.unsubscribe()
    return found


async def test_held_rows_wake_no_relay_and_are_published_by_their_process(
    store_pool: asyncpg.Pool, nc: Any, js: Any
) -> None:
    await provision_streams(js)
    woken: list[str] = []
    listener = await store_pool.acquire()

    def on_notify(*args: Any) -> None:
        woken.append(args[2])

    await listener.add_listener(OUTBOX_CHANNEL, on_notify)
    copies: list[str] = []

    async def copied(msg: Any) -> None:
        copies.append(msg.subject)

    await nc.subscribe("eru.t.*.deploy.*.*", cb=copied)
    messages = events(("d1", "planned"), ("d2", "planned"), ("d1", "completed"))
    try:
        await insert_held(store_pool, messages, 5.0)
        assert await relay_once(PgDelivery(store_pool), js, 100, nc) == 0  # held: not the relays'
        await asyncio.sleep(0.2)
        assert woken == []  # a held-only insert wakes nobody
        async with transaction(store_pool) as conn:  # an ordinary row still wakes the relays
            await queue_many(conn, [(m.subject, m.message, m.envelope) for m in events(("d3", "failed"))])
        async with asyncio.timeout(10):
            while not woken:  # noqa: ASYNC110 -- the notification arrives on the listener connection
                await asyncio.sleep(0.01)
        assert await relay_once(PgDelivery(store_pool), js, 100, nc) == 1  # only the ordinary row

        publisher = CommittedPublisher(PgDelivery(store_pool), js, None, hold_seconds=5.0)
        await publisher.publish(messages, {"d1": "team-a/web", "d2": None})
        await publisher.close()  # acked and marked
        assert publisher.published == 3
        found = await stored(js, 4)
        assert found[1:] == [(m.subject, m.envelope.id) for m in messages]  # in order, the relay's message ids
        rows = await store_pool.fetch("SELECT published_at, held_until FROM outbox ORDER BY id")
        assert all(row["published_at"] is not None and row["held_until"] is None for row in rows)
    finally:
        await listener.remove_listener(OUTBOX_CHANNEL, on_notify)
        await store_pool.release(listener)
    assert copies == []  # no bus given: no copies

    publisher = CommittedPublisher(PgDelivery(store_pool), js, NatsBus(nc), hold_seconds=5.0)
    more = events(("d4", "planned"), ("d5", "planned"))
    await insert_held(store_pool, more, 5.0)
    await publisher.publish(more, {"d4": "team-b/batch", "d5": "team-c"})
    await publisher.close()
    async with asyncio.timeout(10):
        while len(copies) < 2:  # noqa: ASYNC110 -- core NATS deliveries
            await asyncio.sleep(0.01)
    assert sorted(copies) == ["eru.t.team-b.deploy.d4.planned", "eru.t.team-c.deploy.d5.planned"]


async def test_rows_of_a_process_that_died_go_out_once_after_the_hold(store_pool: asyncpg.Pool, js: Any) -> None:
    await provision_streams(js)
    published = events(("d1", "planned"), ("d1", "completed"))  # published, then the process died before the mark
    never = events(("d2", "planned"))  # the process died right after its commit
    await insert_held(store_pool, published + never, 1.0)
    publisher = CommittedPublisher(PgDelivery(store_pool), js, None, hold_seconds=1.0)
    await publisher.publish(published, {})
    await asyncio.gather(*publisher._settling)  # acked; the marks are never written
    assert await relay_once(PgDelivery(store_pool), js, 100) == 0
    await asyncio.sleep(1.2)  # the hold has passed
    assert await relay_once(PgDelivery(store_pool), js, 100) == 3
    found = await stored(js, 3)  # the two published twice are stored once
    assert found == [(m.subject, m.envelope.id) for m in published + never]
    await publisher.mark()  # late marks change nothing: the relay marked them
    assert await store_pool.fetchval("SELECT count(*) FROM outbox WHERE published_at IS NULL") == 0


async def test_a_failed_publish_hands_the_rows_to_the_relays_at_once(
    store_pool: asyncpg.Pool, nats_url: str, js: Any
) -> None:
    await provision_streams(js)
    messages = events(("d1", "planned"), ("d2", "planned"))
    await insert_held(store_pool, messages, 30.0)
    closed = await nats.connect(nats_url)
    closed_js = closed.jetstream()
    await closed.close()
    woken = asyncio.Event()
    listener = await store_pool.acquire()

    def on_notify(*_args: Any) -> None:
        woken.set()

    await listener.add_listener(OUTBOX_CHANNEL, on_notify)
    try:
        publisher = CommittedPublisher(PgDelivery(store_pool), closed_js, None, hold_seconds=30.0)
        await publisher.publish(messages, {})
        await publisher.close()
        assert publisher.released == 2
        await asyncio.wait_for(woken.wait(), timeout=10)  # the relays are woken
    finally:
        await listener.remove_listener(OUTBOX_CHANNEL, on_notify)
        await store_pool.release(listener)
    assert await relay_once(PgDelivery(store_pool), js, 100) == 2  # long before the 30 s hold
    assert await stored(js, 2) == [(m.subject, m.envelope.id) for m in messages]


async def test_the_allocator_publishes_its_batches_rows_itself(scripted_pipeline: ScriptedPipeline) -> None:
    pipe, _ = await scripted_pipeline(("n1", "n2"))
    allocator = pipe.allocators[0]
    assert allocator.publisher is not None
    workload = {"name": "web", "image": "busybox", "resources": {"cpu_request": 0.5}}
    deploy_ids = await asyncio.gather(*(pipe.deploy(count=1 + i % 2, workload=workload) for i in range(6)))
    for deploy_id in deploy_ids:
        assert (await pipe.terminal(deploy_id)).kind == "completed"
        assert pipe.events[deploy_id][0].kind == "planned"
    rows = await pipe.wait_for(lambda: pipe.pool.fetchval("SELECT count(*) FROM outbox WHERE published_at IS NULL"), 0)
    assert rows == 0
    total = await pipe.pool.fetchval("SELECT count(*) FROM outbox")
    # every row (planned events, node commands, completed events) went out from the committing batch, none through
    # the relay, and JetStream holds each deploy event once
    assert allocator.publisher.published == total
    deploy_events = await pipe.pool.fetchval("SELECT count(*) FROM outbox WHERE subject LIKE 'eru.deploy.%'")
    assert (await pipe.js.stream_info(DEPLOY)).state.messages == len(deploy_ids) + deploy_events
