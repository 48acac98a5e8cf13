"""Every stream capped by age and bytes; ERU_NODE drops commands once acted on; old streams updated in place."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.js import api

from eru.bus.consumer import ConsumerOptions, ensure_consumer
from eru.bus.streams import DEFAULT_STREAM_MAX_BYTES, DEPLOY, NODE, StreamSpec, provision_streams, streams_for
from eru.errors import InvalidInput
from eru.settings import load_settings


async def test_an_old_limits_only_stream_is_updated_in_place_idempotently(js: Any) -> None:
    # ERU_NODE as releases before this one made it: limits retention, no byte cap, 7 days
    old = StreamSpec(NODE, ("eru.node.*.cmd.*",), 7 * 86400, "commands to node agents")
    await js.add_stream(config=old.config())
    await ensure_consumer(js, NODE, "node-agent-n1", "eru.node.n1.cmd.*", ConsumerOptions())
    await js.publish("eru.node.n1.cmd.create", b"\x80")  # not yet acted on: it must survive the update
    settings = load_settings(retention_seconds=3600, stream_max_bytes={"ERU_DEPLOY": 64 * 1024**2})
    infos = {info.config.name: info for info in await provision_streams(js, streams_for(settings))}
    node = infos[NODE]
    assert node.config.retention == api.RetentionPolicy.INTEREST
    assert node.config.max_bytes == DEFAULT_STREAM_MAX_BYTES[NODE]
    assert node.config.max_age == 3600  # never longer than the record's retention
    assert (await js.stream_info(NODE)).state.messages == 1
    assert infos[DEPLOY].config.max_bytes == 64 * 1024**2
    assert all(info.config.max_bytes > 0 for info in infos.values())
    again = await provision_streams(js, streams_for(settings))
    assert [info.config for info in again] == [info.config for info in infos.values()]


async def test_a_node_command_is_dropped_once_its_node_acknowledged_it(js: Any) -> None:
    await provision_streams(js, streams_for(load_settings()))
    await ensure_consumer(js, NODE, "node-agent-n1", "eru.node.n1.cmd.*", ConsumerOptions())
    await js.publish("eru.node.n1.cmd.create", b"\x80")
    await js.publish("eru.node.n2.cmd.create", b"\x80")  # n2 has no consumer: nobody will act on it
    assert (await js.stream_info(NODE)).state.messages == 1
    subscription = await js.pull_subscribe_bind(durable="node-agent-n1", stream=NODE)
    (msg,) = await subscription.fetch(1, timeout=5)
    await msg.ack_sync()
    async with asyncio.timeout(10):
        while (await js.stream_info(NODE)).state.messages:  # noqa: ASYNC110 -- polling the server, no event
            await asyncio.sleep(0.05)


def test_a_cap_for_an_unknown_stream_or_below_one_mib_names_the_setting() -> None:
    with pytest.raises(InvalidInput, match=r"stream_max_bytes.*unknown stream 'ERU_NOPE'"):
        load_settings(stream_max_bytes={"ERU_NOPE": 10**9})
    with pytest.raises(InvalidInput, match=r"ERU_STREAM_MAX_BYTES.*at least 1 MiB"):
        load_settings(stream_max_bytes={"ERU_NODE": 10})
    with pytest.raises(InvalidInput, match=r"ERU_RETENTION_SECONDS"):
        load_settings(retention_seconds=5)
