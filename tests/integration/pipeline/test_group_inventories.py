"""A sim process's inventories as one message a flush (docs/node-agent.md "Idle cost"), over a real nats-server and
PostgreSQL: the real node agent (sim runtime, a command group of four nodes, the process's shared timer) sends its
nodes' inventories on `eru.inventories.<group>`, several nodes a message and none on the per-node subject, and the
allocator's reconciler keeps every node's newest; a group message naming another group's node, or sent on another
group's subject, is dead-lettered naming the field and keeps nothing."""

from __future__ import annotations

from typing import Any

import pytest
from nats.js.errors import NotFoundError
from pipeline_harness import Pipeline, recorded, sim_group

from eru.bus import new_envelope, publish
from eru.bus.subjects import group_inventories
from eru.domain.inventory import NodeInventories, NodeInventory

pytestmark = [pytest.mark.timeout(120)]

NODES = ["grp-001", "grp-002", "grp-003", "grp-004"]
KEPT = "SELECT count(*) FROM node_inventories WHERE node = ANY($1::text[])"


async def test_a_grouped_process_sends_its_nodes_inventories_together_and_the_allocator_keeps_them(
    nats_url: str, postgres_dsn: str
) -> None:
    pipe = Pipeline(nats_url, postgres_dsn)
    await pipe.start(distributor=False)
    grouped = await recorded(pipe.nc, "eru.inventories.*", NodeInventories)
    single = await recorded(pipe.nc, "eru.node.*.inventory")
    try:
        async with sim_group(nats_url, len(NODES), consume=False, inventory_seconds=1.0):
            await pipe.wait_for(lambda: pipe.pool.fetchval(KEPT, NODES), len(NODES))
            await pipe.wait_for(lambda: _carried_at_least(grouped, 3 * len(NODES)), True)
            carried = [inventory.node for message in grouped for inventory in message.inventories]
            assert set(carried) == set(NODES)
            assert all(message.group == "grp" for message in grouped)
            # four nodes taking one a second, one flush a second: messages carry several nodes each
            assert len(grouped) < len(carried)
            assert single == []  # nothing on the per-node subject
    finally:
        await pipe.close()


@pytest.mark.parametrize(
    ("subject_group", "message_group", "nodes", "field"),
    [
        ("grp", "grp", ["grp-001", "other-001"], "inventories[1].node"),
        ("other", "grp", ["grp-001"], "group"),  # another process vouching for grp's nodes on its own subject
    ],
)
async def test_a_forged_group_message_is_dead_lettered_naming_the_field_and_keeps_nothing(
    nats_url: str, postgres_dsn: str, subject_group: str, message_group: str, nodes: list[str], field: str
) -> None:
    pipe = Pipeline(nats_url, postgres_dsn)
    await pipe.start(distributor=False)
    try:
        for node in nodes:
            await pipe.register(node, beat=False)
        inventories = [NodeInventory(node=node, agent="forger", taken_at=1.0) for node in nodes]
        forged = NodeInventories(group=message_group, inventories=inventories)
        await publish(pipe.js, group_inventories(subject_group), forged, new_envelope("eru.node.inventories", "test"))

        async def dead_letter_field() -> str | None:
            try:
                dead = await pipe.js.get_last_msg("ERU_DLQ", f"eru.dlq.eru.inventories.{subject_group}")
            except NotFoundError:
                return None
            return (dead.headers or {}).get("Eru-Dlq-Field")

        await pipe.wait_for(dead_letter_field, field)
        assert await pipe.pool.fetchval(KEPT, nodes) == 0  # the whole message refused
    finally:
        await pipe.close()


async def _carried_at_least(messages: list[Any], count: int) -> bool:
    return sum(len(message.inventories) for message in messages) >= count
