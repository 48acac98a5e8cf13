"""One command consumer for every node of a sim process (docs/node-agent.md "A command group per sim process").

A process serving many simulated nodes takes their commands through ONE durable consumer on ERU_NODE, filtered on
exactly its nodes' command subjects (`filter_subjects`), instead of one consumer per node. At 1,000 nodes the
per-node consumers cost 1,000 idle pull requests a second, a consumer-info per node per health check, and for every
command message a pull of its own plus a `no_wait` pull answered `404`; one consumer fetches a batch of commands for
all of its nodes with one pull. The allocator sends the creates of one transaction for many of the group's nodes as
one message on the group's own subject (`eru.group.<group>.cmd.batch`), which the same consumer reads.

The filters are not part of the create API's subject when there are several, so a user allowed to create the group
consumer could point it at any node's commands. Under access control the consumer is therefore created by the stack
(`eru up`'s provisioning, as admin) and the node-agent account may only read its info, pull from it and ack
(eru.bus.access); without access control the process creates it itself. Both build it from `group_consumer` here, so
the agent finds the provisioned consumer identical and never asks to change it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nats.js import JetStreamContext

from eru.bus.consumer_config import ConsumerOptions, ensure_consumer
from eru.bus.streams import NODE
from eru.bus.subjects import group_command, node_commands, token
from eru.errors import InvalidInput

GROUP_DURABLE_PREFIX = "node-group-"
# Commands handled at once by a group's process, and fetched per pull: sim commands are in-memory work, and each
# waits for its result's publish acknowledgement, so a few hundred in flight keep one process busy under load.
GROUP_CONCURRENCY = 256
# As a node's own consumer (eru_node_agent.config.AgentConfig): 5 deliveries, 60 s each.
GROUP_MAX_DELIVER = 5
GROUP_ACK_WAIT_SECONDS = 60.0
GROUP_MAX_ACK_PENDING = 4096


def group_durable(group: str) -> str:
    """The durable consumer of the command group `group` (`node-group-<group>`)."""
    return GROUP_DURABLE_PREFIX + token(group, "command_group")


def group_filters(nodes: Sequence[str]) -> tuple[str, ...]:
    """The command subjects of `nodes` (`eru.node.<node>.cmd.*` each), in order; at least one node."""
    if not nodes:
        raise InvalidInput("nodes", "a command group needs at least one node")
    return tuple(node_commands(token(node, "node")) for node in nodes)


def group_options(*, fetch_timeout_seconds: float = 1.0, heal_check_seconds: float = 2.0) -> ConsumerOptions:
    """How a group's consumer is configured and fetched: new commands only (a new group never replays an older
    one's history), `GROUP_CONCURRENCY` in flight and per fetch."""
    return ConsumerOptions(
        batch=GROUP_CONCURRENCY,
        concurrency=GROUP_CONCURRENCY,
        max_deliver=GROUP_MAX_DELIVER,
        ack_wait_seconds=GROUP_ACK_WAIT_SECONDS,
        max_ack_pending=GROUP_MAX_ACK_PENDING,
        deliver_new_only=True,
        fetch_timeout_seconds=fetch_timeout_seconds,
        heal_check_seconds=heal_check_seconds,
    )


def group_consumer(group: str, nodes: Sequence[str]) -> tuple[str, tuple[str, ...], ConsumerOptions]:
    """The group's durable name, filters and options: what the stack provisions and the agent binds to. The filters
    are the group's own batch subject (`eru.group.<group>.cmd.batch`: one message for many of its nodes) and each
    node's command subjects."""
    return group_durable(group), (group_command(group), *group_filters(nodes)), group_options()


async def ensure_group_consumer(js: JetStreamContext, group: str, nodes: Sequence[str]) -> Any:
    """Create the group's consumer, or update it to exactly these nodes (the stack's provisioning, as admin)."""
    durable, filters, options = group_consumer(group, nodes)
    return await ensure_consumer(js, NODE, durable, filters, options)
