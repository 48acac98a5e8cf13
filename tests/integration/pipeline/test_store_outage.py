"""Store outages are transient (docs/store.md "Outages"): deploys sent while PostgreSQL is down are retried with
backoff and all deployed once it is back; past `store_retry_seconds` a deploy is answered `store_unavailable`, a
`failed` event is published and the request is dead-lettered — nothing is dropped silently. Over loopback TCP and
over the Unix socket `eru up` gives its services: stopped, the socket's file is gone and a reconnect fails with ENOENT,
which once was answered `handler_error` at once and dead-lettered (docs/reliability.md "Transient failures")."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from pipeline_harness import Pipeline, ScriptedNodeAgent
from test_settle_once import recreate_by_hand

from eru.bus.errors import RemoteError
from eru.bus.streams import DEPLOY, DLQ
from eru.bus.subjects import DEPLOY_REQUEST
from eru.store import apply_migrations, create_pool
from eru.testing.postgres_server import EmbeddedPostgres, free_port
from eru_allocator.app import DEPLOY_CONSUMER


@pytest.fixture
def own_postgres() -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL of this test alone (it is stopped and started again), on a fixed port so the DSN stays valid."""
    base = Path(tempfile.mkdtemp(prefix="eru-outage-pg-"))
    server = EmbeddedPostgres(base / "pg", port=free_port(), durable=False)
    server.start()
    server.create_database("eru")
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=["socket", "tcp"])
def transport(request: pytest.FixtureRequest) -> str:
    """How the pipeline reaches PostgreSQL: its Unix socket (as under `eru up`) or loopback TCP."""
    value: str = request.param
    return value


async def start_pipeline(nats_url: str, server: EmbeddedPostgres, retry_seconds: float, transport: str) -> Pipeline:
    dsn = server.socket_dsn_for("eru") if transport == "socket" else server.dsn_for("eru")
    pool = await create_pool(dsn, min_size=1, max_size=1)
    try:
        await apply_migrations(pool)
    finally:
        await pool.close()
    pipe = Pipeline(nats_url, dsn)
    pipe.overrides = {"store_retry_seconds": retry_seconds}
    await pipe.start()
    return pipe


@pytest_asyncio.fixture
async def outage_pipeline(nats_url: str, own_postgres: EmbeddedPostgres, transport: str) -> AsyncIterator[Pipeline]:
    pipe = await start_pipeline(nats_url, own_postgres, retry_seconds=60.0, transport=transport)
    agent = ScriptedNodeAgent(pipe.nc)
    await agent.start()
    try:
        await pipe.register("n1")
        yield pipe
    finally:
        await agent.stop()
        await pipe.close()


async def ack_pending(pipe: Pipeline) -> int:
    info = await pipe.js.consumer_info(DEPLOY, DEPLOY_CONSUMER)
    pending: int = info.num_ack_pending
    return pending


async def test_deploys_sent_during_an_outage_are_all_deployed_once_it_is_back(
    outage_pipeline: Pipeline, own_postgres: EmbeddedPostgres
) -> None:
    pipe = outage_pipeline
    await asyncio.to_thread(own_postgres.stop)
    sent = [asyncio.create_task(pipe.deploy(count=1, request_id=f"outage-{i}", within=60.0)) for i in range(5)]
    # all five are with the allocator, retried in place (not dead-lettered, not answered) while the store is down
    await pipe.wait_for(lambda: ack_pending(pipe), 5, within=20.0)
    assert not any(task.done() for task in sent)
    await asyncio.to_thread(own_postgres.start)
    deploy_ids = await asyncio.gather(*sent)
    for deploy_id in deploy_ids:
        assert (await pipe.terminal(deploy_id, within=30.0)).kind == "completed"
    pool = await create_pool(pipe.dsn, min_size=1, max_size=1)
    try:
        assert await pool.fetchval("SELECT count(*) FROM deploys WHERE request_id LIKE 'outage-%'") == 5
    finally:
        await pool.close()
    info = await pipe.js.stream_info(DLQ)
    assert info.state.messages == 0, "nothing was dead-lettered"


async def test_past_the_deadline_a_deploy_is_answered_store_unavailable_with_a_failed_event(
    nats_url: str, own_postgres: EmbeddedPostgres, transport: str
) -> None:
    pipe = await start_pipeline(nats_url, own_postgres, retry_seconds=1.0, transport=transport)
    try:
        await pipe.register("n1")
        await asyncio.to_thread(own_postgres.stop)
        with pytest.raises(RemoteError) as refused:
            await pipe.deploy(count=1, request_id="too-late", within=30.0)
        assert refused.value.code == "store_unavailable"
        assert "store unavailable" in refused.value.message

        async def failed_events() -> int:
            return sum(1 for events in pipe.events.values() for e in events if e.kind == "failed")

        await pipe.wait_for(failed_events, 1, within=10.0)
        event = next(e for events in pipe.events.values() for e in events if e.kind == "failed")
        assert event.error is not None
        assert event.error.code == "store_unavailable"
        dead = await pipe.js.get_last_msg(DLQ, f"eru.dlq.{DEPLOY_REQUEST}")
        assert dead.headers["Eru-Dlq-Reason"].startswith("store_unavailable")
    finally:
        await asyncio.to_thread(own_postgres.start)
        await pipe.close()


async def test_a_deploy_dead_lettered_while_the_store_was_down_is_settled_once_it_is_back(
    nats_url: str, own_postgres: EmbeddedPostgres
) -> None:
    """Dead-lettered `store_unavailable`, the request cannot be recorded then; the dead letter is recorded as settled
    once PostgreSQL is back, so a consumer re-created by hand that replays the whole stream never deploys it, and
    `eru dlq ls` lists it."""
    pipe = await start_pipeline(nats_url, own_postgres, retry_seconds=1.0, transport="tcp")
    agent = ScriptedNodeAgent(pipe.nc)
    await agent.start()
    try:
        await pipe.register("n1")
        await asyncio.to_thread(own_postgres.stop)
        with pytest.raises(RemoteError) as refused:
            await pipe.deploy(count=1, request_id="dead-in-outage", within=30.0)
        assert refused.value.code == "store_unavailable"
        await asyncio.to_thread(own_postgres.start)

        async def settled_outcome() -> str | None:
            pool = await create_pool(pipe.dsn, min_size=1, max_size=1)
            try:
                outcome: str | None = await pool.fetchval(
                    "SELECT outcome FROM settled_requests WHERE request_id = 'dead-in-outage'"
                )
                return outcome
            finally:
                await pool.close()

        await pipe.wait_for(settled_outcome, "dead_lettered", within=30.0)

        listed = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "eru.cli", "dlq", "ls", "--json", "--nats", pipe.nats_url],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert listed.returncode == 0, listed.stderr
        (letter,) = json.loads(listed.stdout)["dead_letters"]
        assert letter["subject"] == DEPLOY_REQUEST
        assert letter["reason"].startswith("store_unavailable")

        good = await pipe.deploy(count=1, request_id="after-outage", within=30.0)
        assert (await pipe.terminal(good, within=30.0)).kind == "completed"
        creates = len(agent.commands)
        await recreate_by_hand(pipe.js)

        async def replayed() -> bool:
            info = await pipe.js.consumer_info(DEPLOY, DEPLOY_CONSUMER)
            return info.num_pending == 0 and info.num_ack_pending == 0 and info.delivered.stream_seq > 0

        await pipe.wait_for(replayed, True, within=30.0)
        pool = await create_pool(pipe.dsn, min_size=1, max_size=1)
        try:
            assert await pool.fetchval("SELECT count(*) FROM deploys WHERE request_id = 'dead-in-outage'") == 0
            assert await pool.fetchval("SELECT count(*) FROM deploys") == 1
        finally:
            await pool.close()
        assert len(agent.commands) == creates, "the replay sent no node command"
    finally:
        await asyncio.to_thread(own_postgres.start)
        await agent.stop()
        await pipe.close()
