"""A planned deploy's containers: their rows and the commands that create them, one message per node.

The containers a deploy places on one node travel as one `NodeCommands` batch (`eru.node.<node>.cmd.batch`; a lone
container as a plain `create`): one outbox row, one stored message, one delivery and one result message per node
instead of per container, which is most of the cost of a large deploy (docs/pipeline.md, Performance).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pydantic import BaseModel

from eru.bus import Envelope, new_envelope, new_id
from eru.bus.subjects import node_command
from eru.domain import ContainerSpec, DeployRequest, NodeCommand, NodeCommands
from eru.planning import ContainerPlan, NormalizedRequest, PlanningConfig
from eru.store.protocol import ContainerRow, OutboxMessage, Usage
from eru_allocator import records
from eru_allocator.placing import allocation_of


@dataclass
class Creates:
    """What a deploy's containers add to the transaction."""

    rows: list[ContainerRow] = field(default_factory=list)
    messages: list[OutboxMessage] = field(default_factory=list)
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
    creates = Creates()
    per_node: dict[str, list[NodeCommand]] = {}
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
        spec = ContainerSpec(
            container_id=container_id,
            deploy_id=deploy_id,
            workload=workload,
            allocation=allocation,
            desired=req.desired or req.count,  # the eviction budget's base (docs/colocation.md)
            evictions=req.evictions,
        )
        command = NodeCommand(command_id=new_id(), node=plan.node, kind="create", container_id=container_id, spec=spec)
        per_node.setdefault(plan.node, []).append(command)
        creates.usage.setdefault(plan.node, []).append(records.allocation_usage(allocation.model_dump()))
    for node, commands in per_node.items():
        message: BaseModel
        if len(commands) == 1:
            message, kind, message_id = commands[0], "create", commands[0].command_id
        else:
            batch = NodeCommands(batch_id=new_id(), node=node, commands=commands)
            message, kind, message_id = batch, "batch", batch.batch_id
        envelope = new_envelope(
            f"eru.node.cmd.{kind}", source, correlation_id=deploy_id, causation=cause, message_id=message_id
        )
        creates.messages.append(OutboxMessage(node_command(node, kind), message, envelope))
    return creates
