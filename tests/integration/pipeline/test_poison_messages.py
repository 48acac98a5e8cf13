"""Poison messages never stall anything (docs/bus.md "Bounded decoding", "Settling"): a deploy request nesting
10,000 levels is answered and dead-lettered at once, a thousand of them do not fill the deploy consumer's
max_ack_pending, and the core request subjects answer `invalid_input`, never `internal`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from pipeline_harness import Pipeline, pipeline_with_scripted_agent

from eru.bus import new_envelope
from eru.bus.codec import JSON
from eru.bus.consumer import H_REPLY_TO
from eru.bus.envelope import H_CONTENT_TYPE
from eru.bus.streams import DEPLOY, DLQ
from eru.bus.subjects import DEPLOY_REQUEST, allocator_operation
from eru_allocator.app import DEPLOY_CONSUMER

DEPTH = 10_000


def deep_deploy(depth: int = DEPTH) -> bytes:
    """A deploy request whose workload nests `depth` levels of lists."""
    return ('{"pod": "p1", "workload": ' + "[" * depth + "]" * depth + "}").encode()


def json_headers(subject: str, reply_to: str | None = None) -> dict[str, str]:
    headers = {**new_envelope(f"{subject}.request", "test").to_headers(), H_CONTENT_TYPE: JSON}
    if reply_to:
        headers[H_REPLY_TO] = reply_to
    return headers


@pytest_asyncio.fixture
async def pipeline(nats_url: str, postgres_dsn: str) -> AsyncIterator[Pipeline]:
    async with pipeline_with_scripted_agent(nats_url, postgres_dsn) as (pipe, _agent):
        yield pipe


async def next_json(subscription: Any, within: float = 10.0) -> dict[str, Any]:
    msg = await subscription.next_msg(timeout=within)
    value: dict[str, Any] = json.loads(msg.data)
    return value


async def test_a_deploy_nesting_ten_thousand_levels_is_answered_and_dead_lettered(pipeline: Pipeline) -> None:
    inbox = pipeline.nc.new_inbox()
    replies = await pipeline.nc.subscribe(inbox)
    await pipeline.js.publish(DEPLOY_REQUEST, deep_deploy(), headers=json_headers(DEPLOY_REQUEST, inbox))
    answer = await next_json(replies)
    assert answer["status"] == "error"
    assert answer["code"] == "invalid_input"
    assert answer["details"]["field"] == "body"
    assert "nest" in answer["message"]
    # settled once: dead-lettered with its reason, nothing left pending or redelivered
    dead = await pipeline.js.get_last_msg(DLQ, f"eru.dlq.{DEPLOY_REQUEST}")
    assert "nest" in dead.headers["Eru-Dlq-Reason"]
    info = await pipeline.js.consumer_info(DEPLOY, DEPLOY_CONSUMER)
    assert info.num_ack_pending == 0
    assert info.num_redelivered == 0
    # and the next deploy flows
    deploy_id = await pipeline.deploy(count=1)
    assert (await pipeline.terminal(deploy_id)).kind == "completed"


async def test_a_thousand_poison_deploys_do_not_stall_later_deploys(pipeline: Pipeline) -> None:
    body = deep_deploy()
    for _ in range(1000):
        await pipeline.nc.publish(DEPLOY_REQUEST, body, headers=json_headers(DEPLOY_REQUEST))
    await pipeline.nc.flush()
    # a good deploy published after all of them is answered (on the broken main it waited behind 1,000 unacked ones)
    deploy_id = await pipeline.deploy(count=1, within=60.0)
    assert (await pipeline.terminal(deploy_id, within=30.0)).kind == "completed"

    async def settled() -> bool:
        info = await pipeline.js.consumer_info(DEPLOY, DEPLOY_CONSUMER)
        return info.num_ack_pending == 0 and info.num_pending == 0

    await pipeline.wait_for(settled, True, within=60.0)
    info = await pipeline.js.consumer_info(DEPLOY, DEPLOY_CONSUMER)
    assert info.num_redelivered == 0


async def test_allocator_operations_answer_deep_nesting_with_invalid_input(pipeline: Pipeline) -> None:
    for operation in ("remove", "replace", "realloc", "query", "set-node", "cordon", "pod-create"):
        subject = allocator_operation(operation)
        body = ('{"container_id": ' + "[" * DEPTH + "]" * DEPTH + "}").encode()
        reply = await pipeline.nc.request(subject, body, timeout=10, headers=json_headers(subject))
        answer = json.loads(reply.data)
        assert answer["status"] == "error", operation
        assert answer["code"] == "invalid_input", (operation, answer)
        assert answer["details"]["field"] == "body", (operation, answer)
