"""A sim process's heartbeats as one message per interval (docs/node-agent.md "Idle cost"), over a real nats-server
and PostgreSQL: the real node agent (sim runtime, a command group of four nodes, the process's shared timer) sends
one `eru.heartbeats.<group>` message per beat carrying every node and none on the per-node subject, and the allocator
marks every node alive from it; a group message naming another group's node is dead-lettered naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from nats.js.errors import NotFoundError
from pipeline_harness import Pipeline, recorded, sim_group

from eru.bus import new_envelope, publish
from eru.bus.subjects import group_heartbeats
from eru.domain.messages import Heartbeat, NodeHeartbeats

pytestmark = [pytest.mark.timeout(120)]

NODES = ["grp-001", "grp-002", "grp-003", "grp-004"]
STALE = "UPDATE node_status SET heartbeat_at = now() - interval '1 hour' WHERE name = ANY($1::text[])"
ALIVE = "SELECT count(*) FROM node_status WHERE name = ANY($1::text[]) AND heartbeat_at > now() - interval '1 minute'"


async def test_a_grouped_process_beats_all_its_nodes_in_one_message_and_the_allocator_marks_them_alive(
    nats_url: str, postgres_dsn: str
) -> None:
    pipe = Pipeline(nats_url, postgres_dsn)
    await pipe.start(distributor=False)
    grouped = await recorded(pipe.nc, "eru.heartbeats.*", NodeHeartbeats)
    single = await recorded(pipe.nc, "eru.node.*.heartbeat")
    try:
        async with sim_group(nats_url, len(NODES), consume=False):
            await pipe.wait_for(lambda: pipe.pool.fetchval("SELECT count(*) FROM nodes"), len(NODES))
            await pipe.pool.execute(STALE, NODES)  # registered: now only a heartbeat brings them back
            await pipe.wait_for(lambda: pipe.pool.fetchval(ALIVE, NODES), len(NODES))
            seen = len(grouped)
            await pipe.wait_for(lambda: _at_least(grouped, seen + 2), True)
            # every message after all started carries every node of the process: one message per interval
            full = [message for message in grouped if len(message.beats) == len(NODES)]
            assert grouped[-1] in full
            assert len(full) >= 2
            assert all(message.group == "grp" for message in grouped)
            assert sorted(beat.node for beat in grouped[-1].beats) == NODES
            assert single == []  # nothing on the per-node subject
    finally:
        await pipe.close()


async def test_a_group_message_naming_another_groups_node_is_dead_lettered(nats_url: str, postgres_dsn: str) -> None:
    pipe = Pipeline(nats_url, postgres_dsn)
    await pipe.start(distributor=False)
    try:
        await pipe.register("grp-001", beat=False)
        await pipe.register("other-001", beat=False)
        await pipe.pool.execute(STALE, ["grp-001", "other-001"])
        forged = NodeHeartbeats(group="grp", beats=[Heartbeat(node="grp-001"), Heartbeat(node="other-001")])
        await publish(pipe.js, group_heartbeats("grp"), forged, new_envelope("eru.node.heartbeats", "test"))

        async def dead_letter_field() -> str | None:
            try:
                dead = await pipe.js.get_last_msg("ERU_DLQ", "eru.dlq.eru.heartbeats.grp")
            except NotFoundError:
                return None
            return (dead.headers or {}).get("Eru-Dlq-Field")

        await pipe.wait_for(dead_letter_field, "beats[1].node")
        assert await pipe.pool.fetchval(ALIVE, ["grp-001", "other-001"]) == 0  # the whole message refused
    finally:
        await pipe.close()


async def _at_least(items: list[Any], count: int) -> bool:
    return len(items) >= count
