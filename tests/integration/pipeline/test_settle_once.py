"""At-most-once effects for all time and self-healing consumers (docs/bus.md "Settling", docs/store.md "Settled
requests"): a deleted durable consumer comes back within seconds without replaying history, and a consumer
re-created by hand that replays the whole deploy stream deploys nothing twice, nor a request that was dead-lettered.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from nats.js import api
from nats.js.errors import NotFoundError
from pipeline_harness import Pipeline, ScriptedNodeAgent, ScriptedPipeline

from eru.bus import connect, new_envelope, request
from eru.bus.errors import RemoteError
from eru.bus.streams import DEPLOY, DLQ, NODE
from eru.bus.subjects import DEPLOY_REQUEST, allocator_operation
from eru.domain.messages import OperationReply, ReallocRequest
from eru_allocator.app import DEPLOY_CONSUMER
from eru_distributor.app import start_distributor


@pytest_asyncio.fixture
async def pipeline(scripted_pipeline: ScriptedPipeline) -> tuple[Pipeline, ScriptedNodeAgent]:
    return await scripted_pipeline(("n1", "n2"), start={"distributor": False})


async def add_distributor(pipe: Pipeline) -> None:
    nc = await connect(pipe.nats_url, name="distributor")
    server = await start_distributor(nc, source="distributor/test")
    pipe._closers += [server.stop, nc.close]


async def _value(value: bool) -> bool:
    return value


async def consumer_exists(js: Any, stream: str, durable: str) -> bool:
    try:
        await js.consumer_info(stream, durable)
    except NotFoundError:
        return False
    return True


async def deploy_rows(pipe: Pipeline) -> int:
    count: int = await pipe.pool.fetchval("SELECT count(*) FROM deploys")
    return count


async def test_a_deleted_deploy_consumer_comes_back_and_deploys_flow_again(
    pipeline: tuple[Pipeline, ScriptedNodeAgent],
) -> None:
    pipe, agent = pipeline
    await add_distributor(pipe)
    first = await pipe.deploy(count=1)
    assert (await pipe.terminal(first)).kind == "completed"
    runner = next(c for c in pipe.allocators[0].consumers if c.durable == DEPLOY_CONSUMER)
    await pipe.wait_for(lambda: _value(runner.ack_floor >= 1), True)  # its periodic check saw the ack
    await pipe.js.delete_consumer(DEPLOY, DEPLOY_CONSUMER)
    # a deploy sent while the consumer is gone is kept by the stream and handled once it is back
    second = await pipe.deploy(count=1, within=15.0)
    assert (await pipe.terminal(second)).kind == "completed"
    info = await pipe.js.consumer_info(DEPLOY, DEPLOY_CONSUMER)
    # re-created after the last handled message, not from the start of the stream
    assert info.config.deliver_policy == api.DeliverPolicy.BY_START_SEQUENCE
    assert await deploy_rows(pipe) == 2
    assert len([c for c in agent.commands if c.kind == "create"]) == 2


async def test_a_deleted_node_agent_consumer_comes_back(nats_url: str, postgres_dsn: str) -> None:
    from pipeline_harness import pipeline_with_sim_nodes

    async with pipeline_with_sim_nodes(nats_url, postgres_dsn, count=1) as pipe:
        first = await pipe.deploy(count=1)
        assert (await pipe.terminal(first)).kind == "completed"
        consumers = [info.name async for info in _consumers(pipe.js, NODE)]
        assert len(consumers) == 1
        await pipe.js.delete_consumer(NODE, consumers[0])
        await pipe.wait_for(lambda: consumer_exists(pipe.js, NODE, consumers[0]), True, within=5.0)
        second = await pipe.deploy(count=1)
        assert (await pipe.terminal(second, within=20.0)).kind == "completed"
        running = await pipe.pool.fetchval("SELECT count(*) FROM containers WHERE state = 'running'")
        assert running == 2


async def _consumers(js: Any, stream: str) -> AsyncIterator[Any]:
    for info in await js.consumers_info(stream):
        yield info


async def recreate_by_hand(js: Any) -> None:
    """What a careless operator does: delete the consumer and add it back delivering the whole stream."""
    config = api.ConsumerConfig(
        name=DEPLOY_CONSUMER,
        durable_name=DEPLOY_CONSUMER,
        filter_subject=DEPLOY_REQUEST,
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=5.0,
        max_deliver=-1,
        deliver_policy=api.DeliverPolicy.ALL,
    )
    for _ in range(20):  # the allocator may re-create it between our delete and add: then do it again
        await js.delete_consumer(DEPLOY, DEPLOY_CONSUMER)
        try:
            await js.add_consumer(DEPLOY, config=config)
        except Exception:  # lost the race to the allocator's own re-creation: retry
            continue
        info = await js.consumer_info(DEPLOY, DEPLOY_CONSUMER)
        if info.config.deliver_policy == api.DeliverPolicy.ALL:
            return
    raise AssertionError("could not re-create the consumer by hand")


async def test_replaying_the_whole_stream_deploys_nothing_twice_and_no_dead_letter(
    pipeline: tuple[Pipeline, ScriptedNodeAgent],
) -> None:
    pipe, agent = pipeline
    # no distributor yet: this request is retried max_deliver times, then dead-lettered (answered `unavailable`)
    with pytest.raises(RemoteError) as refused:
        await pipe.deploy(count=1, request_id="dead-one", within=30.0)
    assert refused.value.code == "unavailable"
    dead = await pipe.js.get_last_msg(DLQ, f"eru.dlq.{DEPLOY_REQUEST}")
    assert dead.headers["Eru-Dlq-Reason"].startswith("gave up after 5 deliveries")
    await add_distributor(pipe)
    made = [await pipe.deploy(count=1, request_id=f"good-{i}") for i in range(3)]
    for deploy_id in made:
        assert (await pipe.terminal(deploy_id)).kind == "completed"
    creates = len(agent.commands)
    assert await deploy_rows(pipe) == 3

    await recreate_by_hand(pipe.js)

    async def replayed() -> bool:
        info = await pipe.js.consumer_info(DEPLOY, DEPLOY_CONSUMER)
        return info.num_pending == 0 and info.num_ack_pending == 0 and info.delivered.stream_seq > 0

    await pipe.wait_for(replayed, True, within=30.0)
    assert await deploy_rows(pipe) == 3, "a replayed request never deploys again"
    assert await pipe.pool.fetchval("SELECT count(*) FROM deploys WHERE request_id = 'dead-one'") == 0
    assert len(agent.commands) == creates, "no node command was sent twice"
    settled = await pipe.pool.fetchval("SELECT outcome FROM settled_requests WHERE request_id = 'dead-one'")
    assert settled == "dead_lettered"


async def test_a_realloc_resent_with_the_same_envelope_applies_once(
    pipeline: tuple[Pipeline, ScriptedNodeAgent],
) -> None:
    pipe, agent = pipeline
    await add_distributor(pipe)
    deploy_id = await pipe.deploy(
        count=1, workload={"name": "web", "image": "busybox", "resources": {"memory_request": "256MiB"}}
    )
    assert (await pipe.terminal(deploy_id)).kind == "completed"
    (container,) = await pipe.containers(deploy_id=deploy_id)
    grow = ReallocRequest(container_ids=[container["id"]], memory_request=128 * 1024**2)
    envelope = new_envelope(f"{allocator_operation('realloc')}.request", "test")
    first = await request(pipe.nc, allocator_operation("realloc"), grow, OperationReply, 10, envelope=envelope)
    await pipe.wait_for(lambda: _state(pipe, container["id"]), "running")
    again = await request(pipe.nc, allocator_operation("realloc"), grow, OperationReply, 10, envelope=envelope)
    assert again == first
    (after,) = await pipe.containers(deploy_id=deploy_id)
    assert json.loads(after["allocation"])["memory"] == 384 * 1024**2, "the delta was applied once"
    assert len([c for c in agent.commands if c.kind == "update"]) == 1


async def _state(pipe: Pipeline, container_id: str) -> str:
    state: str = await pipe.pool.fetchval("SELECT state FROM containers WHERE id = $1", container_id)
    return state


async def test_every_durable_consumer_of_the_allocator_comes_back_within_five_seconds(
    pipeline: tuple[Pipeline, ScriptedNodeAgent],
) -> None:
    pipe, _agent = pipeline
    durables = [(c.stream, c.durable) for c in pipe.allocators[0].consumers]
    assert len(durables) >= 8  # deploys, tenant deploys, events, registrations, heartbeats, inventories, ...
    for stream, durable in durables:
        await pipe.wait_for(lambda s=stream, d=durable: consumer_exists(pipe.js, s, d), True, within=10.0)
    for stream, durable in durables:
        await pipe.js.delete_consumer(stream, durable)

    async def all_back() -> bool:
        for stream, durable in durables:
            if not await consumer_exists(pipe.js, stream, durable):
                return False
        return True

    await pipe.wait_for(all_back, True, within=5.0)
