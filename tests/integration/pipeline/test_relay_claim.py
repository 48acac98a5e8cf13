"""The outbox relay's transaction is BEGIN, one claim (with each deploy event's tenant), the publishes, COMMIT
(eru_allocator.delivery.outbox.relay_once): on a real PostgreSQL and nats-server, every row reaches JetStream once, in
order, and each deploy event is copied to its tenant's subject (a group's events to its parent tenant)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg

from eru.bus import new_envelope
from eru.bus.streams import provision_streams
from eru.domain import DeployEvent
from eru.store import create_pool, transaction
from eru_allocator.delivery.outbox import queue_many, relay_once
from eru_allocator.store.delivery_store import PgDelivery

DEPLOY_SQL = """INSERT INTO deploys (id, request_id, pod, tenant, status, request)
                VALUES ($1, $1, 'p1', $2, 'planned', '{}')"""


async def test_one_claim_statement_publishes_in_order_and_copies_to_tenants(
    store_pool: asyncpg.Pool, postgres_dsn: str, nc: Any, js: Any
) -> None:
    await provision_streams(js)
    await store_pool.execute("INSERT INTO pods (name) VALUES ('p1')")
    await store_pool.execute(DEPLOY_SQL, "d1", "team-a")
    await store_pool.execute(DEPLOY_SQL, "d2", "team-b/batch")  # a group: its events go to team-b
    copies: list[str] = []
    stored: list[str] = []

    async def copied(msg: Any) -> None:
        copies.append(msg.subject)

    await nc.subscribe("eru.t.*.deploy.*.*", cb=copied)
    subscription = await js.subscribe("eru.deploy.*.*", ordered_consumer=True)
    messages = [
        (f"eru.deploy.{deploy_id}.{kind}", DeployEvent(deploy_id=deploy_id, kind=kind), new_envelope("e", "test"))
        for deploy_id, kind in (("d1", "planned"), ("d2", "planned"), ("d1", "completed"), ("dX", "failed"))
    ]
    async with transaction(store_pool) as conn:
        await queue_many(conn, messages)
    statements: list[str] = []
    pool = await create_pool(postgres_dsn, min_size=1, max_size=1)  # one connection: every statement logged
    try:
        async with pool.acquire() as conn:
            conn.add_query_logger(lambda query: statements.append(query.query.split()[0]))
        assert await relay_once(PgDelivery(pool), js, 100, nc) == 4
        assert statements == ["BEGIN", "WITH", "COMMIT;"]
        assert await relay_once(PgDelivery(pool), js, 100, nc) == 0
    finally:
        await pool.close()
    async with asyncio.timeout(30):
        while len(stored) < 4:
            msg = await subscription.next_msg(timeout=30)
            stored.append(msg.subject)
        await nc.flush()
        while len(copies) < 3:  # noqa: ASYNC110 -- core NATS deliveries, no event to wait on
            await asyncio.sleep(0.01)
    assert stored == [subject for subject, _, _ in messages]
    assert sorted(copies) == [
        "eru.t.team-a.deploy.d1.completed",
        "eru.t.team-a.deploy.d1.planned",
        "eru.t.team-b.deploy.d2.planned",
    ]
    published = await store_pool.fetchval("SELECT count(*) FROM outbox WHERE published_at IS NOT NULL")
    assert published == 4
    assert json.loads(await store_pool.fetchval("SELECT headers FROM outbox ORDER BY id LIMIT 1"))
