"""Heartbeats and conditions go to `node_status` (docs/store.md "Node status"): a batch is one statement, they never
wait on a deploy holding the node's row (the soak's > 1 s lock waits; at 1,000 nodes they held the allocator's pool
connections for seconds), they do not change the node's version, unknown nodes are left out, and the newest
condition wins."""

from __future__ import annotations

import asyncio
import json

import asyncpg

from eru.domain.colocation import NodeCondition
from eru.domain.messages import Heartbeat
from eru_allocator.nodes.registry import heartbeat, heartbeats, record_conditions
from eru_allocator.store.node_store import PgNodes


async def _nodes(pool: asyncpg.Pool, *names: str) -> None:
    await pool.execute("INSERT INTO pods (name) VALUES ('hb') ON CONFLICT DO NOTHING")
    for name in names:
        await pool.execute("INSERT INTO nodes (name, pod, memory) VALUES ($1, 'hb', 0)", name)


def _beat(node: str) -> Heartbeat:
    return Heartbeat(node=node, containers=[])


async def test_heartbeats_are_one_statement_never_wait_on_a_deploy_and_leave_the_version_alone(
    store_pool: asyncpg.Pool,
) -> None:
    await _nodes(store_pool, "hb1", "hb2", "hb3")
    assert await heartbeat(PgNodes(store_pool), _beat("nobody")) is False
    assert await heartbeats(PgNodes(store_pool), []) == set()
    versions = dict(await store_pool.fetch("SELECT name, version FROM nodes"))
    async with store_pool.acquire() as deploy:
        held = deploy.transaction()
        await held.start()
        # what a deploy's usage write takes, for its whole transaction
        await deploy.execute("SELECT 1 FROM nodes WHERE name IN ('hb1', 'hb2') FOR NO KEY UPDATE")
        beats = [_beat("hb2"), _beat("hb1"), _beat("nobody"), _beat("hb1"), _beat("hb3")]  # a repeat, an unknown
        known = await asyncio.wait_for(heartbeats(PgNodes(store_pool), beats), timeout=5)
        assert known == {"hb1", "hb2", "hb3"}
        ages = await store_pool.fetch("SELECT name, extract(epoch FROM now() - heartbeat_at) AS age FROM node_status")
        assert {row["name"] for row in ages} == {"hb1", "hb2", "hb3"}
        assert all(row["age"] < 5 for row in ages)
        await held.rollback()
    assert dict(await store_pool.fetch("SELECT name, version FROM nodes")) == versions
    assert await store_pool.fetchval("SELECT count(*) FROM node_status WHERE name = 'nobody'") == 0


def _condition(node: str, time: float, **fields: object) -> NodeCondition:
    return NodeCondition.model_validate({"node": node, "time": time, **fields})


async def test_the_newest_condition_wins_without_waiting_on_a_deploy(store_pool: asyncpg.Pool) -> None:
    await _nodes(store_pool, "c1", "c2")
    stored = "SELECT conditions FROM node_status WHERE name = $1"
    async with store_pool.acquire() as deploy:
        held = deploy.transaction()
        await held.start()
        await deploy.execute("SELECT 1 FROM nodes WHERE name IN ('c1', 'c2') FOR NO KEY UPDATE")
        batch = [
            _condition("c1", 10.0, forbid_schedule_cpu=True),
            _condition("c1", 12.0, state="suppressed"),  # the newest of the batch wins
            _condition("c1", 11.0),
            _condition("c2", 5.0, forbid_schedule_memory=True),
            _condition("ghost", 5.0),  # unknown node: left out
        ]
        await asyncio.wait_for(record_conditions(PgNodes(store_pool), batch), timeout=5)
        await held.rollback()
    assert json.loads(await store_pool.fetchval(stored, "c1"))["state"] == "suppressed"
    assert json.loads(await store_pool.fetchval(stored, "c2"))["forbid_schedule_memory"] is True
    await record_conditions(
        PgNodes(store_pool), [_condition("c1", 9.0, forbid_schedule_cpu=True)]
    )  # late and older: ignored
    assert json.loads(await store_pool.fetchval(stored, "c1"))["time"] == 12.0
    assert await store_pool.fetchval("SELECT count(*) FROM node_status WHERE name = 'ghost'") == 0


async def test_a_condition_that_frees_batch_room_wakes_the_pods_waiting_requests(store_pool: asyncpg.Pool) -> None:
    await _nodes(store_pool, "w1", "w2")
    await record_conditions(
        PgNodes(store_pool), [_condition("w1", 1.0, forbid_schedule_cpu=True), _condition("w2", 1.0)]
    )
    await store_pool.execute(
        """INSERT INTO deploy_waits (deploy_id, request_key, pod, tenant, deadline, request, envelope, reason)
           VALUES ('d1', 'k1', 'hb', '', now() + interval '1 minute', '{}', '{}', '{}')"""
    )
    woken: asyncio.Queue[str] = asyncio.Queue()

    def on_notify(*args: object) -> None:
        woken.put_nowait(str(args[3]))

    async with store_pool.acquire() as listener:
        await listener.add_listener("eru_admission", on_notify)
        await record_conditions(PgNodes(store_pool), [_condition("w2", 2.0)])  # nothing freed: no pass
        await record_conditions(
            PgNodes(store_pool), [_condition("w1", 2.0), _condition("w2", 3.0)]
        )  # w1's forbid cleared
        assert await asyncio.wait_for(woken.get(), timeout=5) == "hb"
        assert woken.empty()  # one pass per pod and batch
        await listener.remove_listener("eru_admission", on_notify)
