"""A replayed dead-lettered deploy never deploys, even when the replay comes before the dead-letter recorder has
written its row (docs/store.md "Settled requests", eru_allocator.dead_letter_gate): real nats-server, a real
PostgreSQL stopped and started again, the allocator's own consumers."""

from __future__ import annotations

import asyncio

import pytest
from pipeline_harness import ScriptedNodeAgent
from test_settle_once import recreate_by_hand
from test_store_outage import own_postgres, start_pipeline

from eru.bus.errors import RemoteError
from eru.bus.streams import DEPLOY, DLQ
from eru.store import create_pool
from eru.testing.nats_server import free_port
from eru.testing.postgres_server import EmbeddedPostgres
from eru_allocator.app import DEPLOY_CONSUMER
from eru_allocator.dead_letter_gate import RECORDER_CONSUMER
from eru_allocator.dead_letter_recorder import DeadLetterRecorder

__all__ = ["own_postgres"]  # the fixture, imported for pytest


async def test_a_replay_before_the_dead_letter_is_recorded_waits_and_does_not_deploy(
    nats_url: str, own_postgres: EmbeddedPostgres
) -> None:
    pipe = await start_pipeline(nats_url, own_postgres, retry_seconds=1.0, transport="tcp")
    agent = ScriptedNodeAgent(pipe.nc)
    await agent.start()
    # a pool on a port nobody listens on: the recorder's writes fail as while the store is away (transient: it naks)
    away = await create_pool(f"postgresql://postgres@127.0.0.1:{free_port()}/eru", min_size=0, max_size=1)
    allocator = pipe.allocators[0]
    recorder = next(c for c in allocator.consumers if isinstance(c, DeadLetterRecorder))
    gate = allocator.deploy_ctx.dead_letters
    assert gate is not None
    try:
        await pipe.register("n1")
        await asyncio.to_thread(own_postgres.stop)
        with pytest.raises(RemoteError) as refused:
            await pipe.deploy(count=1, request_id="gap-1", within=30.0)
        assert refused.value.code == "store_unavailable"
        # The store comes back, but the recorder has not written the letter's row yet (it waits out its back-off):
        # exactly the window of a replay that used to deploy the dead-lettered request.
        recorder.pool = away
        await asyncio.to_thread(own_postgres.start)
        pool = await create_pool(pipe.dsn, min_size=1, max_size=1)
        try:
            assert await pool.fetchval("SELECT count(*) FROM settled_requests WHERE request_id = 'gap-1'") == 0
            creates = len(agent.commands)
            await recreate_by_hand(pipe.js)  # replays the whole deploy stream, gap-1 included

            async def held_or_deployed() -> bool:
                deployed = await pool.fetchval("SELECT count(*) FROM deploys WHERE request_id = 'gap-1'")
                return bool(deployed) or gate.held > 0

            await pipe.wait_for(held_or_deployed, True, within=60.0)
            assert await pool.fetchval("SELECT count(*) FROM deploys WHERE request_id = 'gap-1'") == 0
            letters = await pipe.js.consumer_info(DLQ, RECORDER_CONSUMER)
            assert letters.num_pending + letters.num_ack_pending == 1, "the letter is still unrecorded"

            recorder.pool = allocator.pool  # the recorder's next try writes the row; the replay is answered from it

            async def replayed() -> bool:
                info = await pipe.js.consumer_info(DEPLOY, DEPLOY_CONSUMER)
                return info.num_pending == 0 and info.num_ack_pending == 0 and info.delivered.stream_seq > 0

            await pipe.wait_for(replayed, True, within=60.0)
            outcome = await pool.fetchval("SELECT outcome FROM settled_requests WHERE request_id = 'gap-1'")
            assert outcome == "dead_lettered"
            assert await pool.fetchval("SELECT count(*) FROM deploys WHERE request_id = 'gap-1'") == 0
            assert len(agent.commands) == creates, "the replay sent no node command"
        finally:
            await pool.close()
    finally:
        await asyncio.to_thread(own_postgres.start)
        await agent.stop()
        await pipe.close()
        await away.close()
