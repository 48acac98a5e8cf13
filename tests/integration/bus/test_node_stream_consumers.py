"""ERU_NODE takes one durable consumer per node beyond nats-server's default of 1,000 per stream (docs/bus.md)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from nats.js import api

from eru.bus.streams import NODE, NODE_MAX_CONSUMERS, default_streams, ensure_stream, provision_streams

NODES = 1_050  # past the server's default limit (the 1,001st consumer was refused)


async def _add_node_consumers(js: Any, names: range) -> None:
    async def one(index: int) -> None:
        config = api.ConsumerConfig(
            durable_name=f"node-agent-n{index}",
            filter_subject=f"eru.node.n{index}.cmd.*",
            ack_policy=api.AckPolicy.EXPLICIT,
        )
        await js.add_consumer(NODE, config)

    for start in range(names.start, names.stop, 150):  # a few JetStream API requests in flight at a time
        await asyncio.gather(*(one(i) for i in range(start, min(start + 150, names.stop))))


async def test_the_node_stream_holds_a_consumer_per_node_past_one_thousand(js: Any) -> None:
    node = next(spec for spec in default_streams() if spec.name == NODE)
    # in memory: the same limit, without the server writing 1,050 consumers' state to disk
    await ensure_stream(js, dataclasses.replace(node, memory=True))
    await _add_node_consumers(js, range(NODES))
    info = await js.stream_info(NODE)
    assert info.config.max_consumers == NODE_MAX_CONSUMERS
    assert info.state.consumer_count == NODES


async def test_a_node_stream_made_without_the_setting_is_raised_in_place(js: Any) -> None:
    node = next(spec for spec in default_streams() if spec.name == NODE)
    await ensure_stream(js, dataclasses.replace(node, max_consumers=-1))  # as streams were made before
    assert (await js.stream_info(NODE)).config.max_consumers == -1
    await provision_streams(js)
    assert (await js.stream_info(NODE)).config.max_consumers == NODE_MAX_CONSUMERS
