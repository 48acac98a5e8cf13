"""A node agent's state rebuilt from the engine after a restart (docs/node-agent.md): containers eru made that are
still there are kept and reported found (or stopped), those the agent remembered but the engine lost are reported
removed, and containers that are not eru's are reported foreign and left alone."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eru.bus import new_envelope
from eru.domain.messages import ContainerEvent
from eru.nodeagent.inventory import Inventory, classify
from eru_node_agent.state import Known

if TYPE_CHECKING:
    from eru_node_agent.agent import NodeAgent

LIVE_STATES = ("running", "paused", "restarting")


async def rebuild(agent: NodeAgent) -> Inventory:
    """The state from the engine's labels: present containers are kept, vanished ones reported removed, foreign
    ones reported and left alone."""
    dissociated = agent.state.dissociated
    engine = [c for c in await agent.runtime.list() if c.labels.get("eru.container_id") not in dissociated]
    inventory = classify(agent.node, ((c.engine_id, c.name, c.labels, c.state) for c in engine), agent.state.containers)
    correlation = new_envelope("eru.node.rebuilt", agent.config.source)
    for container_id, (managed, state) in inventory.present.items():
        remembered = agent.state.containers.get(container_id)
        allocation = remembered.allocation if remembered is not None else managed.allocation
        labels = dict(next(c.labels for c in engine if c.labels.get("eru.container_id") == container_id))
        running = state in LIVE_STATES
        agent.state.containers[container_id] = Known(labels=labels, allocation=allocation, running=running)
        kind = "found" if running else "stopped"
        await agent.emit(
            ContainerEvent(
                node=agent.node,
                container_id=container_id,
                deploy_id=managed.deploy_id or None,
                kind=kind,
                reason=f"present after restart ({state})",
                allocation=allocation,
            ),
            correlation,
        )
    for container_id in inventory.vanished:
        known = agent.state.containers.pop(container_id)
        await agent.emit(
            ContainerEvent(
                node=agent.node,
                container_id=container_id,
                deploy_id=known.labels.get("eru.deploy_id"),
                kind="removed",
                reason="vanished: not on the engine when the agent restarted",
                allocation=known.allocation,
            ),
            correlation,
        )
    for foreign in inventory.foreign:
        await agent.emit(
            ContainerEvent(node=agent.node, container_id=foreign.container_id, kind="foreign", reason=foreign.reason),
            correlation,
        )
    agent.store.save(agent.state)
    return inventory
