"""Only a process that says it reads its group's command batches (`group_batches`) has its nodes' creates grouped
(docs/node-agent.md "One message per group", "Upgrades"): an older sim process's heartbeats leave its nodes on
per-node commands, which its consumer reads."""

from __future__ import annotations

import time
from typing import Any

import pytest

from eru.bus.envelope import new_envelope
from eru.domain import NodeRegistration
from eru.domain.messages import Heartbeat, NodeHeartbeats
from eru.errors import InvalidInput
from eru.testing.deliveries import delivery
from eru.testing.memory_store import InMemoryStore
from eru_allocator.nodes.groups import COMMAND_GROUPS
from eru_allocator.nodes.registry import register_many
from eru_allocator.nodes.reports import NodeReports

NODES = ["sim1-001", "sim1-002"]


async def _reports() -> NodeReports:
    store = InMemoryStore()
    await register_many(
        store,
        [
            NodeRegistration.model_validate({"node": n, "pod": "p", "cpu_map": {"0": 100}, "memory": 1 << 30})
            for n in NODES
        ],
    )
    event_ctx: Any = None  # group heartbeats never reach the events context
    return NodeReports(store, event_ctx, reconcile_policy=None, reconcile=False)  # type: ignore[arg-type]


async def _beat(reports: NodeReports, **fields: Any) -> None:
    beats = NodeHeartbeats(group="sim1", beats=[Heartbeat(node=n) for n in NODES], **fields)
    on = delivery("eru.heartbeats.sim1", stream="ERU_METRICS", consumer="allocator-group-heartbeats")
    await reports.on_group_heartbeats(beats, new_envelope("eru.node.heartbeats", "test"), on)


async def test_a_process_that_reads_group_batches_has_its_nodes_heard_in_their_group() -> None:
    reports = await _reports()
    await _beat(reports, group_batches=True)
    assert [COMMAND_GROUPS.group_of(n, now=time.monotonic()) for n in NODES] == ["sim1", "sim1"]


async def test_an_older_process_without_group_batches_keeps_per_node_commands() -> None:
    reports = await _reports()
    await _beat(reports)
    assert [COMMAND_GROUPS.group_of(n, now=time.monotonic()) for n in NODES] == [None, None]


async def test_beats_of_a_group_sent_on_another_groups_subject_mark_nothing_alive() -> None:
    # The process of group "sim2" may publish only on eru.heartbeats.sim2, but its message names a group itself:
    # before the subject was checked, naming "sim1" there kept sim1's nodes alive from another process.
    reports = await _reports()
    beats = NodeHeartbeats(group="sim1", beats=[Heartbeat(node=n) for n in NODES], group_batches=True)
    on = delivery("eru.heartbeats.sim2", stream="ERU_METRICS", consumer="allocator-group-heartbeats")
    with pytest.raises(InvalidInput, match="group"):
        await reports.on_group_heartbeats(beats, new_envelope("eru.node.heartbeats", "test"), on)
    assert [COMMAND_GROUPS.group_of(n, now=time.monotonic()) for n in NODES] == [None, None]
