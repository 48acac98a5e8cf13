"""Container-event batches overlap (docs/pipeline.md step 6): once a batch has written (every lock taken), the next
batch starts while it commits. On a real PostgreSQL with the first batch held at its COMMIT: a batch of other
deploys completes meanwhile; a batch touching the held batch's deploy waits for its lock and sees its commit."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from eru.bus import new_envelope
from eru.domain import ContainerEvent
from eru_allocator.containers import events
from eru_allocator.containers.events import EventContext
from eru_allocator.flow.batcher import Batcher
from eru_allocator.store import sql
from eru_allocator.store.container_store import PgContainerEvents
from eru_allocator.store.node_store import PgNodes

WAITING_SQL = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"


class HeldCommit:
    """A pool whose first transaction stops before COMMIT until `release` is set."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.holding = asyncio.Event()
        self.release = asyncio.Event()
        self.held = False

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[Any]:
        async with self.pool.acquire() as conn:
            yield _Conn(conn, self)


class _Conn:
    def __init__(self, conn: Any, owner: HeldCommit) -> None:
        self._conn = conn
        self._owner = owner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    @asynccontextmanager
    async def transaction(self, **options: Any) -> AsyncIterator[None]:
        async with self._conn.transaction(**options):
            yield
            if not self._owner.held:
                self._owner.held = True
                self._owner.holding.set()
                await self._owner.release.wait()


async def _setup(pool: asyncpg.Pool) -> None:
    await pool.execute("INSERT INTO pods (name) VALUES ('p1')")
    await pool.execute("INSERT INTO nodes (name, pod, cpu_map, memory) VALUES ('n1', 'p1', '{\"0\": 100}', 1024)")
    for deploy_id, containers in (("d1", ["c1", "c3"]), ("d2", ["c2"])):
        await pool.execute(
            "INSERT INTO deploys (id, request_id, pod, tenant, status, request) "
            "VALUES ($1, $1, 'p1', 'default', 'planned', '{}')",
            deploy_id,
        )
        for cid in containers:
            await pool.execute(
                sql.INSERT_CONTAINER_SQL, cid, deploy_id, "n1", "p1", "w", "busybox", "default", "prod", 0,
                json.dumps({"cpu_map": {"0": 1}, "memory": 1}), "{}", "planned", "{}", None,
            )  # fmt: skip


def _started(message_id: str, container_id: str, deploy_id: str) -> events.Report:
    event = ContainerEvent(node="n1", container_id=container_id, deploy_id=deploy_id, kind="started")
    return [event], new_envelope("eru.container.batch", "test").with_id(message_id)


async def _status(pool: asyncpg.Pool, deploy_id: str) -> str:
    return str(await pool.fetchval("SELECT status FROM deploys WHERE id = $1", deploy_id))


async def test_the_next_batch_runs_while_one_commits(store_pool: asyncpg.Pool) -> None:
    await _setup(store_pool)
    held = HeldCommit(store_pool)
    ctx = EventContext("test", PgContainerEvents(held), PgNodes(held))  # type: ignore[arg-type]  # holds its first COMMIT
    batcher: Batcher[events.Report, None] = Batcher(lambda _key, items: events.apply_events(ctx, items), pipelined=True)
    first = asyncio.create_task(batcher.submit("events", _started("m1", "c1", "d1")))
    await asyncio.wait_for(held.holding.wait(), 30)
    # another deploy's batch goes through while the first one waits to commit
    await asyncio.wait_for(batcher.submit("events", _started("m2", "c2", "d2")), 30)
    assert await _status(store_pool, "d2") == "completed"
    assert await _status(store_pool, "d1") == "planned"
    # a batch for the held batch's deploy waits for its lock …
    third = asyncio.create_task(batcher.submit("events", _started("m3", "c3", "d1")))
    async with asyncio.timeout(30):
        while not await store_pool.fetchval(WAITING_SQL):  # noqa: ASYNC110 -- polling PostgreSQL, no event to wait on
            await asyncio.sleep(0.01)
    assert not first.done()
    assert not third.done()
    # … and sees its commit: d1's last container ends the deploy
    held.release.set()
    await asyncio.wait_for(asyncio.gather(first, third), 30)
    assert await _status(store_pool, "d1") == "completed"
    result = json.loads(await store_pool.fetchval("SELECT result FROM deploys WHERE id = 'd1'"))
    assert result["started"] == ["c1", "c3"]
