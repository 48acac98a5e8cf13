"""A batch of container events is two statements on a real PostgreSQL (docs/store.md "Container events in two
statements"): `eru_open_event_batch` marks, locks and reads, one statement writes the rows, the finished deploys and
the outbox; the node usage follows only when resources come back. A repeated message is one statement and changes
nothing; the terminal events carry the deploy's placements and the outcome of every member."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import asyncpg
import pytest

from eru.bus import new_envelope
from eru.bus.codec import decode
from eru.domain import ContainerEvent, DeployEvent
from eru_allocator.containers import events
from eru_allocator.containers.events import EventContext
from eru_allocator.store import sql
from eru_allocator.store.container_store import PgContainerEvents
from eru_allocator.store.node_store import PgNodes

NODE_SQL = "INSERT INTO nodes (name, pod, cpu_map, memory, used_memory) VALUES ($1, 'p1', '{\"0\": 100}', 1024, 3)"
DEPLOY_SQL = """INSERT INTO deploys (id, request_id, pod, tenant, status, request, result)
                VALUES ($1, $1, 'p1', 'default', 'planned', '{}', $2::jsonb)"""


@pytest.fixture
async def counted(postgres_dsn: str) -> AsyncIterator[tuple[asyncpg.Pool, list[str]]]:
    """A one-connection pool whose every statement (BEGIN and COMMIT included) is recorded."""
    statements: list[str] = []

    def record(query: asyncpg.connection.LoggedQuery) -> None:
        text = " ".join(query.query.split())[:60]
        if not text.startswith("SELECT pg_advisory_unlock_all()"):  # the pool's reset on release, after COMMIT
            statements.append(text)

    async def setup(conn: asyncpg.Connection) -> None:
        conn.add_query_logger(record)

    pool = await asyncpg.create_pool(postgres_dsn, min_size=1, max_size=1, setup=setup)
    try:
        yield pool, statements
    finally:
        await pool.close()


async def _setup(pool: asyncpg.Pool) -> None:
    await pool.execute("INSERT INTO pods (name) VALUES ('p1')")
    await pool.execute(NODE_SQL, "n1")
    for deploy_id, containers in (("d0", ["c0"]), ("d1", ["c1", "c2"]), ("d2", ["c3"])):
        await pool.execute(DEPLOY_SQL, deploy_id, json.dumps({"placements": {"n1": len(containers)}}))
        for container_id in containers:
            await pool.execute(
                sql.INSERT_CONTAINER_SQL, container_id, deploy_id, "n1", "p1", "w", "busybox", "default", "prod",
                0, json.dumps({"cpu_map": {"0": 10}, "memory": 1}), "{}", "planned", "{}", None,
            )  # fmt: skip


def _report(message_id: str, *changes: tuple[str, str, str]) -> events.Report:
    reported = [
        ContainerEvent(node="n1", container_id=cid, deploy_id=did, kind=kind, reason=f"{kind} by test")
        for cid, did, kind in changes
    ]
    return reported, new_envelope("eru.container.batch", "test").with_id(message_id)


async def _outbox(pool: asyncpg.Pool) -> list[tuple[str, DeployEvent]]:
    rows = await pool.fetch("SELECT subject, body FROM outbox ORDER BY id")
    return [(row["subject"], decode(row["body"], DeployEvent)) for row in rows]


async def test_started_events_are_two_statements_and_finish_the_deploy_whose_members_all_reported(
    counted: tuple[asyncpg.Pool, list[str]],
) -> None:
    pool, statements = counted
    await _setup(pool)
    ctx = EventContext("test", PgContainerEvents(pool), PgNodes(pool))
    # a first batch: asyncpg looks up the types the statements use once per connection (not counted below)
    await events.apply_events(ctx, [_report("m0", ("c0", "d0", "started"), ("c0", "d0", "failed"))])
    await pool.execute("DELETE FROM outbox")
    statements.clear()
    await events.apply_events(ctx, [_report("m1", ("c1", "d1", "started"), ("c3", "d2", "started"))])
    assert statements[0].startswith("BEGIN"), statements
    assert statements[-1] == "COMMIT;", statements
    body = statements[1:-1]
    assert len(body) == 2, statements
    assert body[0].startswith("SELECT * FROM eru_open_event_batch")
    assert body[1].startswith("WITH moved AS")
    states = dict(await pool.fetch("SELECT id, state FROM containers ORDER BY id"))
    assert states == {"c0": "failed", "c1": "running", "c2": "planned", "c3": "running"}
    statuses = dict(await pool.fetch("SELECT id, status FROM deploys ORDER BY id"))
    assert statuses == {"d0": "failed", "d1": "planned", "d2": "completed"}
    result = json.loads(await pool.fetchval("SELECT result FROM deploys WHERE id = 'd2'"))
    assert result == {"placements": {"n1": 1}, "started": ["c3"], "failed": {}}
    published = await _outbox(pool)
    assert [subject for subject, _ in published] == ["eru.deploy.d1.progress", "eru.deploy.d2.completed"]
    assert published[0][1].started == ["c1"]
    assert published[1][1].placements == {"n1": 1}
    assert published[1][1].started == ["c3"]
    assert await pool.fetchval("SELECT used_memory FROM nodes WHERE name = 'n1'") == 2  # c0's came back, nothing since

    # the same message again: marked already, one statement, nothing written
    statements.clear()
    await events.apply_events(ctx, [_report("m1", ("c1", "d1", "started"), ("c3", "d2", "started"))])
    assert len(statements) == 3, statements
    assert len(await _outbox(pool)) == 2

    # a failure returns the container's memory (the node usage follows the write) and ends d1 as partial
    statements.clear()
    await events.apply_events(ctx, [_report("m2", ("c2", "d1", "failed"))])
    assert len(statements) == 5, statements  # BEGIN, open, write, node usage, COMMIT
    assert await pool.fetchval("SELECT used_memory FROM nodes WHERE name = 'n1'") == 1
    last = (await _outbox(pool))[-1]
    assert last[0] == "eru.deploy.d1.partial"
    assert last[1].started == ["c1"]
    assert last[1].failed == {"c2": "failed by test"}
    assert await pool.fetchval("SELECT status FROM deploys WHERE id = 'd1'") == "partial"


async def test_only_the_fresh_messages_of_a_batch_are_applied(counted: tuple[asyncpg.Pool, list[str]]) -> None:
    pool, _ = counted
    await _setup(pool)
    ctx = EventContext("test", PgContainerEvents(pool), PgNodes(pool))
    await events.apply_events(ctx, [_report("m1", ("c1", "d1", "started"))])
    # m1 again says c2 failed (it cannot: a repeat carries the same events) — it must be skipped, m3 applied
    await events.apply_events(ctx, [_report("m1", ("c2", "d1", "failed")), _report("m3", ("c2", "d1", "started"))])
    states = dict(await pool.fetch("SELECT id, state FROM containers ORDER BY id"))
    assert states == {"c0": "planned", "c1": "running", "c2": "running", "c3": "planned"}
    assert await pool.fetchval("SELECT status FROM deploys WHERE id = 'd1'") == "completed"
