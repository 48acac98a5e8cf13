"""A planned deploy's containers: their rows and the commands that create them, one message per node or group.

The containers a deploy places on one node travel as one `NodeCommands` batch (`eru.node.<node>.cmd.batch`; a lone
container as a plain `create`): one outbox row, one stored message, one delivery and one result message per node
instead of per container, which is most of the cost of a large deploy (docs/pipeline.md, Performance). Nodes of a
sim process's command group go further: a transaction's creates on several of them are one `GroupCommands`
(`eru.group.<group>.cmd.batch`, docs/node-agent.md "One message per group"), so a batch of 400 containers on 5,000
nodes is two messages, not ~400.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from pydantic import BaseModel

from eru.bus import Envelope, new_envelope, new_id
from eru.bus.subjects import group_command, node_command
from eru.domain import ContainerSpec, DeployRequest, GroupCommands, NodeCommand, NodeCommands
from eru.planning import ContainerPlan, NormalizedRequest, PlanningConfig
from eru.store.protocol import ContainerRow, OutboxMessage, Usage
from eru_allocator.deploy.placing import allocation_of
from eru_allocator.nodes.groups import COMMAND_GROUPS, CommandGroups

MAX_COMMANDS_PER_MESSAGE = 1000  # NodeCommands.commands' bound


@dataclass(frozen=True)
class PlannedCommand:
    """A create command and what caused it (its deploy, the request's envelope, the replica)."""

    command: NodeCommand
    deploy_id: str
    cause: Envelope
    source: str


@dataclass
class Creates:
    """What a deploy's containers add to the transaction (the commands are sent by `command_messages`, one message
    per node or command group for the whole batch)."""

    rows: list[ContainerRow] = field(default_factory=list)
    commands: dict[str, list[PlannedCommand]] = field(default_factory=dict)
    usage: dict[str, list[Usage]] = field(default_factory=dict)


def create_containers(
    req: DeployRequest,
    normalized: NormalizedRequest,
    plans: list[ContainerPlan],
    deploy_id: str,
    config: PlanningConfig,
    source: str,
    cause: Envelope,
) -> Creates:
    """The container rows (state `planned`), node usage and create commands of `plans`, grouped per node."""
    workload = req.workload
    resources = workload.resources.model_dump_json()
    labels = json.dumps(workload.labels)
    desired = req.desired or req.count  # the eviction budget's base (docs/colocation.md)
    creates = Creates()
    for plan in plans:
        container_id = new_id()
        allocation = allocation_of(plan, normalized, config)
        creates.rows.append(
            ContainerRow(
                container_id,
                deploy_id,
                plan.node,
                req.pod,
                workload.name,
                workload.image,
                workload.tenant,
                workload.priority_class,
                workload.priority,
                allocation.model_dump_json(),
                resources,
                "planned",
                labels,
                None,
            )
        )
        # Validated construction, not model_construct: the nested models are instances (not validated again) and
        # pydantic's Rust validator is faster than model_construct's Python loop over the fields (31 vs 57 µs for
        # a spec and its command, measured under load).
        spec = ContainerSpec(
            container_id=container_id,
            deploy_id=deploy_id,
            workload=workload,
            allocation=allocation,
            desired=desired,
            evictions=req.evictions,
        )
        command = NodeCommand(command_id=new_id(), node=plan.node, kind="create", container_id=container_id, spec=spec)
        creates.commands.setdefault(plan.node, []).append(PlannedCommand(command, deploy_id, cause, source))
        numa = {str(allocation.numa_node): allocation.memory} if allocation.numa_node is not None else {}
        creates.usage.setdefault(plan.node, []).append(Usage(allocation.cpu_map, allocation.memory, numa))
    return creates


def command_messages(
    commands: dict[str, list[PlannedCommand]], groups: CommandGroups | None = None, now: float | None = None
) -> list[OutboxMessage]:
    """The messages of everything a transaction creates: for nodes of a command group (`groups`, by default as the
    allocator heard them: `COMMAND_GROUPS`), one `GroupCommands` per group when it has two nodes or more here;
    else one message per node, a plain `create` for a lone container, a `NodeCommands` batch for several."""
    known = COMMAND_GROUPS if groups is None else groups
    at = time.monotonic() if now is None else now
    by_group: dict[str, list[str]] = {}
    alone: list[str] = []
    for node in commands:
        group = known.group_of(node, at)
        if group is None:
            alone.append(node)
        else:
            by_group.setdefault(group, []).append(node)
    messages: list[OutboxMessage] = []
    for group, nodes in by_group.items():
        if len(nodes) == 1:
            alone += nodes
            continue
        planned = [p for node in nodes for p in commands[node]]
        for start in range(0, len(planned), MAX_COMMANDS_PER_MESSAGE):
            part = planned[start : start + MAX_COMMANDS_PER_MESSAGE]
            batch = GroupCommands(batch_id=new_id(), group=group, commands=[p.command for p in part])
            envelope = _envelope(part, "eru.group.cmd.batch", batch.batch_id)
            messages.append(OutboxMessage(group_command(group), batch, envelope))
    for node in alone:
        messages += _node_messages(node, commands[node])
    return messages


def _node_messages(node: str, planned: list[PlannedCommand]) -> list[OutboxMessage]:
    messages: list[OutboxMessage] = []
    for start in range(0, len(planned), MAX_COMMANDS_PER_MESSAGE):
        part = planned[start : start + MAX_COMMANDS_PER_MESSAGE]
        message: BaseModel
        if len(part) == 1:
            message, kind, message_id = part[0].command, "create", part[0].command.command_id
        else:
            batch = NodeCommands(batch_id=new_id(), node=node, commands=[p.command for p in part])
            message, kind, message_id = batch, "batch", batch.batch_id
        envelope = _envelope(part, f"eru.node.cmd.{kind}", message_id)
        messages.append(OutboxMessage(node_command(node, kind), message, envelope))
    return messages


def _envelope(part: list[PlannedCommand], kind: str, message_id: str) -> Envelope:
    """Caused by the first request, correlated with its deploy when all are one deploy's, else with the message."""
    correlation = part[0].deploy_id if len({p.deploy_id for p in part}) == 1 else message_id
    return new_envelope(
        kind, part[0].source, correlation_id=correlation, causation=part[0].cause, message_id=message_id
    )
