"""Request/reply against a real nats-server: typed replies, error replies, timeouts, queue groups, JSON clients."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgpack
import pytest
from bus_helpers import Job, Reply, Resources, eventually

from eru.bus import subjects
from eru.bus.codec import JSON
from eru.bus.connection import connect
from eru.bus.consumer import Consumer, ConsumerOptions, Delivery
from eru.bus.envelope import Envelope, new_envelope
from eru.bus.errors import NoResponders, RemoteError, RequestTimeout
from eru.bus.requests import reply_to_delivery, request, serve
from eru.bus.streams import DEPLOY, provision_streams
from eru.errors import InvalidInput, PlanningFailure

SUBJECT = subjects.DISTRIBUTOR_PLACE


async def place(model: Job, envelope: Envelope) -> Reply:
    if model.request.cpu_request > 64:
        raise PlanningFailure("not enough cpu", code="insufficient_cpu", wanted=model.request.cpu_request, free=64)
    if model.name == "boom":
        raise RuntimeError("unexpected")
    return Reply(job=model.name, cores=model.request.cpu_request)


def job(name: str, cores: float = 2.0) -> Job:
    return Job(name=name, request=Resources(cpu_request=cores, memory=0))


async def test_typed_request_and_reply(nc: Any) -> None:
    server = await serve(nc, SUBJECT, Job, place, queue="distributor", source="distributor/r1")
    try:
        reply = await request(nc, SUBJECT, job("web", 3.5), Reply, timeout=5)
    finally:
        await server.stop()
    assert reply == Reply(job="web", cores=3.5)


async def test_error_reply_raises_a_typed_error_with_code_and_details(nc: Any) -> None:
    server = await serve(nc, SUBJECT, Job, place, queue="distributor", source="distributor/r1")
    try:
        with pytest.raises(RemoteError) as caught:
            await request(nc, SUBJECT, job("big", 100), Reply, timeout=5)
        with pytest.raises(RemoteError) as bug:
            await request(nc, SUBJECT, job("boom"), Reply, timeout=5)
    finally:
        await server.stop()
    assert caught.value.code == "insufficient_cpu"
    assert caught.value.message == "not enough cpu"
    assert caught.value.details == {"wanted": 100.0, "free": 64}
    assert bug.value.code == "handler_error", "a handler bug is named as such, never a bare 'internal'"
    assert bug.value.message == f"the handler of {SUBJECT} failed: RuntimeError"


async def test_schema_violation_is_answered_naming_the_field(nc: Any) -> None:
    server = await serve(nc, SUBJECT, Job, place, queue="distributor", source="distributor/r1")
    try:
        body = {"name": "x", "request": {"cpu_request": -1, "memory": 0}}
        answer = await nc.request(SUBJECT, msgpack.packb(body), timeout=5)
        raw = await nc.request(SUBJECT, b"\xc1", timeout=5)
    finally:
        await server.stop()
    error = msgpack.unpackb(answer.data)
    assert (error["status"], error["code"], error["details"]["field"]) == (
        "error",
        "invalid_input",
        "request.cpu_request",
    )
    assert msgpack.unpackb(raw.data)["details"]["field"] == "body"


async def test_json_client_gets_a_json_reply(nc: Any) -> None:
    server = await serve(nc, SUBJECT, Job, place, queue="distributor", source="distributor/r1")
    try:
        body = json.dumps({"name": "j", "request": {"cpu_request": 1, "memory": 5}}).encode()
        answer = await nc.request(SUBJECT, body, timeout=5, headers={"Content-Type": JSON})
        typed = await request(nc, SUBJECT, job("k"), Reply, timeout=5, content_type=JSON)
    finally:
        await server.stop()
    assert json.loads(answer.data) == {"status": "accepted", "job": "j", "cores": 1.0}
    assert answer.headers["Content-Type"] == JSON
    assert typed.job == "k"


async def test_no_responder_and_timeout_are_distinct_errors(nc: Any) -> None:
    with pytest.raises(NoResponders, match=SUBJECT):
        await request(nc, SUBJECT, job("x"), Reply, timeout=2)

    async def never(model: Job, envelope: Envelope) -> Reply:
        await asyncio.sleep(30)
        raise AssertionError("unreachable")

    server = await serve(nc, SUBJECT, Job, never, queue="distributor", source="distributor/r1")
    try:
        with pytest.raises(RequestTimeout, match=r"within 0\.3s"):
            await request(nc, SUBJECT, job("x"), Reply, timeout=0.3)
    finally:
        for task in list(server._in_flight):
            task.cancel()
        await server.stop()


async def test_queue_group_spreads_requests_over_replicas(nc: Any, nats_url: str) -> None:
    other = await connect(nats_url, name="eru-test-replica-2")
    counts = {"r1": 0, "r2": 0}

    def responder(replica: str) -> Any:
        async def answer(model: Job, envelope: Envelope) -> Reply:
            counts[replica] += 1
            return Reply(job=model.name, cores=0)

        return answer

    servers = [
        await serve(nc, SUBJECT, Job, responder("r1"), queue="distributor", source="r1"),
        await serve(other, SUBJECT, Job, responder("r2"), queue="distributor", source="r2"),
    ]
    try:
        replies = await asyncio.gather(*(request(nc, SUBJECT, job(f"j{i}"), Reply, timeout=5) for i in range(40)))
    finally:
        for server in servers:
            await server.stop()
        await other.close()
    assert sorted(reply.job for reply in replies) == sorted(f"j{i}" for i in range(40))
    assert counts["r1"] + counts["r2"] == 40, "each request is answered exactly once"
    assert counts["r1"] > 0
    assert counts["r2"] > 0


async def test_request_to_a_stream_captured_subject_gets_the_consumers_answer(nc: Any) -> None:
    js = nc.jetstream()
    await provision_streams(js)
    answered: list[str] = []

    async def allocator(model: Job, envelope: Envelope, delivery: Delivery) -> None:
        answer: Reply | InvalidInput
        if model.name == "bad":
            answer = InvalidInput("workload.name", "reserved")
        else:
            answer = Reply(status="accepted", job=model.name, cores=model.request.cpu_request)
        await reply_to_delivery(nc, delivery, envelope, answer, source="allocator/r1")
        answered.append(model.name)

    options = ConsumerOptions(fetch_timeout_seconds=0.2)
    consumer = Consumer(js, DEPLOY, "allocator", subjects.DEPLOY_REQUEST, Job, allocator, options=options)
    task = asyncio.create_task(consumer.run())
    try:
        reply = await request(nc, subjects.DEPLOY_REQUEST, job("web", 4), Reply, timeout=10)
        with pytest.raises(RemoteError) as caught:
            await request(nc, subjects.DEPLOY_REQUEST, job("bad"), Reply, timeout=10)
        await eventually(lambda: answered == ["web", "bad"])
    finally:
        consumer.stop()
        await asyncio.wait_for(task, timeout=10)
    assert reply == Reply(job="web", cores=4.0)
    assert (caught.value.code, caught.value.details["field"]) == ("invalid_input", "workload.name")
    assert (await js.stream_info(DEPLOY)).state.messages == 2, "the requests are stored for replay"


async def test_reply_carries_an_envelope_caused_by_the_request(nc: Any) -> None:
    server = await serve(nc, SUBJECT, Job, place, queue="distributor", source="distributor/r1")
    try:
        envelope = new_envelope("place", "allocator/r1", correlation_id="deploy-9")
        answer = await nc.request(
            SUBJECT, msgpack.packb(job("e").model_dump(mode="json")), timeout=5, headers=envelope.to_headers()
        )
    finally:
        await server.stop()
    reply_envelope = Envelope.from_headers(answer.headers)
    assert reply_envelope.correlation_id == "deploy-9"
    assert reply_envelope.causation_id == envelope.id
    assert reply_envelope.source == "distributor/r1"


async def test_a_request_whose_answer_was_lost_asks_again_with_a_new_message_id(nc: Any) -> None:
    seen: list[tuple[str, bytes]] = []

    async def answer_all_but_the_first(msg: Any) -> None:
        # the first answer is lost (as one sent while the caller's connection reconnected would be)
        seen.append((msg.headers["ce-id"], msg.data))
        if len(seen) > 1:
            await msg.respond(msgpack.packb({"job": "again", "cores": 1.0}))

    subscription = await nc.subscribe(SUBJECT, cb=answer_all_but_the_first)
    try:
        with pytest.raises(RequestTimeout):  # without asking again the caller never learns the outcome
            await request(nc, SUBJECT, job("x"), Reply, timeout=0.5)
        seen.clear()
        reply = await request(nc, SUBJECT, job("x"), Reply, timeout=5, ask_again_after=0.2)
        assert reply.job == "again"
        assert len(seen) == 2
        (first_id, first_body), (second_id, second_body) = seen
        assert first_body == second_body  # the same request (its own idempotency key inside)
        assert first_id != second_id  # under a new message id: the stream's duplicate window keeps both
    finally:
        await subscription.unsubscribe()
