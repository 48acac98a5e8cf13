"""Strings the allocator must refuse on `eru.deploy.request` (docs/cli.md "Limits", docs/bus.md "Bounded decoding"):
a 120 KB image, an image name over Docker's 255 characters, a lone surrogate (JSON `\\ud800`) and bytes that are not
UTF-8 (msgpack) are each answered `invalid_input` naming the field the sender wrote (`workload.image`, never the
derived `workload.name`), dead-lettered once, and the allocator keeps placing the next deploy.

Before the fix the 120 KB and 300-character images were accepted, and the lone surrogate reached the ledger."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import msgpack
import pytest
import pytest_asyncio
from pipeline_harness import Pipeline, pipeline_with_scripted_agent

from eru.bus import new_envelope
from eru.bus.codec import JSON, MSGPACK
from eru.bus.consumer import H_REPLY_TO
from eru.bus.envelope import H_CONTENT_TYPE
from eru.bus.streams import DEPLOY
from eru.bus.subjects import DEPLOY_REQUEST
from eru_allocator.app import DEPLOY_CONSUMER


@pytest_asyncio.fixture
async def pipeline(nats_url: str, postgres_dsn: str) -> AsyncIterator[Pipeline]:
    async with pipeline_with_scripted_agent(nats_url, postgres_dsn) as (pipe, _agent):
        yield pipe


def deploy_json(image: str) -> bytes:
    """A deploy request as JSON text; `image` is put in as written (escapes stay escapes)."""
    return ('{"pod": "p1", "count": 1, "workload": {"name": "web", "image": "' + image + '"}}').encode()


BODIES: list[tuple[str, bytes, str, str, str]] = [
    ("120 KB image", deploy_json("x" * 120_000), JSON, "workload.image", "120,000 characters"),
    ("image name over 255", deploy_json("busybox" + "x" * 300), JSON, "workload.image", "Docker's limit of 255"),
    ("lone surrogate", deploy_json("busy\\ud800box"), JSON, "workload.image", "lone surrogate U+D800"),
    (
        "not UTF-8",
        msgpack.packb({"pod": "p1", "workload": {"name": "web", "image": b"busy\xffbox"}}, use_bin_type=False),
        MSGPACK,
        "workload.image",
        "not UTF-8 text (byte 0xff",
    ),
]


@pytest.mark.parametrize(("case", "body", "kind", "field", "reason"), BODIES, ids=[b[0] for b in BODIES])
async def test_a_bad_string_is_refused_naming_its_field_and_deploys_go_on(
    pipeline: Pipeline, case: str, body: bytes, kind: str, field: str, reason: str
) -> None:
    inbox = pipeline.nc.new_inbox()
    replies = await pipeline.nc.subscribe(inbox)
    headers = {**new_envelope(f"{DEPLOY_REQUEST}.request", "test").to_headers(), H_CONTENT_TYPE: kind}
    await pipeline.js.publish(DEPLOY_REQUEST, body, headers={**headers, H_REPLY_TO: inbox})
    msg = await replies.next_msg(timeout=10)
    answer: dict[str, Any] = json.loads(msg.data) if kind == JSON else msgpack.unpackb(msg.data)
    assert answer["status"] == "error", (case, answer)
    assert answer["code"] == "invalid_input", (case, answer)
    assert answer["details"]["field"] == field, (case, answer)
    assert reason in answer["message"], (case, answer)
    assert len(answer["message"]) < 400, (case, answer["message"][:500])

    async def settled() -> bool:
        info = await pipeline.js.consumer_info(DEPLOY, DEPLOY_CONSUMER)
        return info.num_ack_pending == 0 and info.num_pending == 0

    await pipeline.wait_for(settled, True, within=30.0)
    deploy_id = await pipeline.deploy(count=1)
    assert (await pipeline.terminal(deploy_id)).kind == "completed"
