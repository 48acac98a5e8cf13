"""A client whose answer was lost still learns the outcome (docs/deploy.md "Clients: ask again with the same request
id"): the answer to a deploy is a core-NATS message, sent at most once, so one sent while the client's connection
reconnects is gone. Here the first answer goes to an inbox nobody listens to (what a reconnecting client's inbox
is at that moment); asking again under the same message id is swallowed by the stream's duplicate window, asking
again under a new message id with the same request id is answered with the deploy the first ask made — once."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest_asyncio
from pipeline_harness import Pipeline, ScriptedPipeline

from eru.bus import new_envelope
from eru.bus.codec import decode_value, encode
from eru.bus.consumer import H_REPLY_TO
from eru.bus.publish import message_headers
from eru.bus.subjects import DEPLOY_REQUEST
from eru.domain import DeployRequest
from eru.testing.asking import ask_until_answered


@pytest_asyncio.fixture
async def pipeline(scripted_pipeline: ScriptedPipeline) -> Pipeline:
    pipe, _ = await scripted_pipeline(("n1",))
    return pipe


async def completed(pipe: Pipeline, request_id: str) -> bool:
    """True once the request's deploy is completed in the ledger (its answer has been sent by then)."""
    status = await pipe.pool.fetchval("SELECT status FROM deploys WHERE request_id = $1", request_id)
    return bool(status == "completed")


async def test_an_answer_lost_is_given_again_to_the_same_request_id_under_a_new_message_id(pipeline: Pipeline) -> None:
    pipe = pipeline
    request = DeployRequest.model_validate(
        {"request_id": "lost-answer-1", "pod": "p1", "count": 1, "workload": {"name": "web", "image": "busybox"}}
    )
    inbox = pipe.nc.new_inbox()
    headers = {**message_headers(new_envelope("eru.deploy.request", "test-client")), H_REPLY_TO: inbox}
    body = encode(request)
    ack = await pipe.js.publish(DEPLOY_REQUEST, body, headers=headers, timeout=10)
    assert not ack.duplicate
    # answered meanwhile, to an inbox nobody listened to: the answer is lost
    await pipe.wait_for(lambda: completed(pipe, "lost-answer-1"), True, within=30)
    deploy_id = await pipe.pool.fetchval("SELECT id FROM deploys WHERE request_id = 'lost-answer-1'")

    replies: list[dict[str, Any]] = []
    answered = asyncio.Event()

    async def on_reply(msg: Any) -> None:
        value = decode_value(msg.data, (msg.headers or {}).get("Content-Type"))
        replies.append(value if isinstance(value, dict) else {})
        answered.set()

    await pipe.nc.subscribe(inbox, cb=on_reply)  # the client is back
    await pipe.nc.flush()
    # the same message again is a duplicate to the stream: stored once, delivered once, never answered again
    again = await pipe.js.publish(DEPLOY_REQUEST, body, headers=headers, timeout=10)
    assert again.duplicate
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(answered.wait(), 1.0)
    assert replies == []

    asked = await ask_until_answered(
        pipe.js, DEPLOY_REQUEST, body, headers, answered, until=time.monotonic() + 30, wait=0.2
    )
    assert asked >= 1
    assert replies[0] == {"status": "accepted", "deploy_id": deploy_id}, replies
    rows = await pipe.pool.fetch("SELECT id FROM deploys WHERE request_id = 'lost-answer-1'")
    assert [row["id"] for row in rows] == [deploy_id]  # asking again deployed nothing more
    containers = await pipe.pool.fetchval("SELECT count(*) FROM containers WHERE deploy_id = $1", deploy_id)
    assert containers == 1
