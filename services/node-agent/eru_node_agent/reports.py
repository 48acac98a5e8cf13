"""What a node agent reports on its own, besides command results (docs/node-agent.md): what changed in the engine
behind its back (containers that exited or vanished, health checks that changed), the inventory of everything the
engine runs, and metrics samples. Functions over the agent's state, called by `NodeAgent`'s loops."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from eru.bus import Envelope, new_envelope, publish
from eru.bus.publish import publish_value
from eru.domain.inventory import NodeInventory
from eru.domain.messages import ContainerEvent
from eru.nodeagent.engine import L_CONTAINER, named_by_eru
from eru.nodeagent.metrics import (
    LISTED,
    QUIET_INVENTORY_FLOOR_SECONDS,
    QUIET_SAMPLE_FLOOR_SECONDS,
    inventory_settled,
    quiet_floor,
    sample_news,
    worth_sending,
)
from eru_node_agent.inventory import list_entries
from eru_node_agent.metrics import sample_wire
from eru_node_agent.runtime.base import RuntimeContainer

if TYPE_CHECKING:
    from eru_node_agent.agent import NodeAgent


async def reconcile(agent: NodeAgent) -> None:
    """Compare what the agent believes with the engine (containers no command is working on)."""
    # Only containers no command touched while the engine was listed: a create finishing meanwhile is not in
    # the listing, a start meanwhile is not reflected in it.
    before = {cid: agent.touched.get(cid, 0) for cid in agent.state.containers if not agent.locks.busy(cid)}
    listed = await agent.runtime.list()
    # by eru id, eru's own only: a stray that copied a container's labels must not stand for it (docs/node-agent.md)
    engine = {c.labels.get(L_CONTAINER): c for c in listed if named_by_eru(c.name, c.labels.get(L_CONTAINER, ""))}
    cause = Cause(agent.config.source)
    for container_id, touched in before.items():
        known = agent.state.containers.get(container_id)
        if known is None or agent.locks.busy(container_id) or agent.touched.get(container_id, 0) != touched:
            continue
        current = engine.get(container_id)
        if current is None:
            del agent.state.containers[container_id]
            event = ContainerEvent(
                node=agent.node,
                container_id=container_id,
                deploy_id=known.labels.get("eru.deploy_id"),
                kind="removed",
                reason="vanished from the engine",
                allocation=known.allocation,
            )
        elif known.running and current.state in ("exited", "dead"):
            agent.state.containers[container_id] = dataclasses.replace(known, running=False)
            code = f" with code {current.exit_code}" if current.exit_code is not None else ""
            event = ContainerEvent(
                node=agent.node,
                container_id=container_id,
                deploy_id=known.labels.get("eru.deploy_id"),
                kind="stopped",
                reason=f"exited{code}",
            )
        else:
            continue
        agent.store.save(agent.state)
        await agent.emit(event, cause.envelope)
    await report_health(agent, engine, cause)


class Cause:
    """The envelope of a reconcile (`eru.node.reconciled`), made on first use: a sim process reconciles every node at
    every heartbeat (1,000 nodes a second at 5,000 nodes), and almost every round finds nothing to report
    (docs/performance.md "Where the sim agents' time goes at 5,000 nodes")."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._envelope: Envelope | None = None

    @property
    def envelope(self) -> Envelope:
        """The one envelope every event of this reconcile is caused by."""
        if self._envelope is None:
            self._envelope = new_envelope("eru.node.reconciled", self.source)
        return self._envelope


async def report_health(agent: NodeAgent, engine: dict[str | None, RuntimeContainer], cause: Cause) -> None:
    """Report each running container whose health check changed since the last look as a `health` event (the
    engine's state on Docker, the modelled one on sim; docs/node-agent.md "Health and node TTL")."""
    for container_id in [cid for cid in agent.health if cid not in agent.state.containers]:
        del agent.health[container_id]
    for container_id, known in agent.state.containers.items():
        current = engine.get(container_id)
        health = current.health if current is not None and current.running else None
        if health is None or agent.health.get(container_id) == health:
            continue
        agent.health[container_id] = health
        event = ContainerEvent(
            node=agent.node,
            container_id=container_id,
            deploy_id=known.labels.get("eru.deploy_id"),
            kind="health",
            health=health,
            reason=f"health check: {health}",
        )
        await agent.emit(event, cause.envelope)


async def inventory_once(agent: NodeAgent, *, periodic: bool = False) -> NodeInventory:
    """Publish everything the engine runs with its applied resources (`eru.node.<node>.inventory`; a node of a
    command group hands it to its process's batch instead, `eru_node_agent.group_inventories`). A `periodic`
    one of an empty node that says nothing new goes out only at its quiet floor (300–450 s)
    (docs/node-agent.md "Idle cost"); the one at start, and every one while the agent settles
    (`inventory_settled`), always.

    Containers a command works on at any time from the listing to the publication are reported `busy`: their
    listing may already be out of date (docs/operations.md, the race rule)."""
    window: set[str] = set()
    agent.trail.windows.append(window)
    handed = False
    try:
        taken_at = time.time()
        busy = agent.locks.held()
        entries = await list_entries(
            agent.runtime, agent.node, agent.trail.suppressed, agent.state.containers, agent.state.dissociated
        )
        busy |= window | agent.locks.held()
        report = NodeInventory(
            node=agent.node,
            agent=agent.run_id,
            taken_at=taken_at,
            interval_seconds=agent.config.inventory_interval_seconds,
            containers=entries,
            busy=sorted(busy),
            removed=agent.trail.removed(),
        )
        eventful = bool(report.containers or report.busy or report.removed)
        news = LISTED if eventful else sample_news(report.model_dump(mode="json"))
        settled = inventory_settled(agent.first_inventory_at, taken_at, agent.config.inventory_interval_seconds)
        if (
            periodic
            and settled
            and not worth_sending(
                news,
                eventful,
                agent.last_inventory,
                taken_at,
                quiet_floor(QUIET_INVENTORY_FLOOR_SECONDS, _fraction(agent)),
            )
        ):
            agent.inventories_skipped += 1
            return report
        if agent.inventory_batch is not None:  # the process sends it with its other nodes' (its window stays open)
            agent.inventory_batch.hand(agent, report, window, news)
            handed = True
            return report
        envelope = new_envelope("eru.node.inventory", agent.config.source)
        await publish(agent.js, agent.inventory_subject, report, envelope)
    finally:
        if not handed:
            agent.trail.windows.remove(window)
    agent.inventories += 1
    agent.last_inventory = (news, taken_at)
    if agent.first_inventory_at is None:
        agent.first_inventory_at = taken_at
    return report


async def metrics_once(agent: NodeAgent, interval_seconds: float) -> dict[str, Any]:
    """Sample the node and its containers and publish the sample to `eru.metrics.<node>`; the sample in its wire form
    (`NodeMetrics.model_validate` of it is the model)."""
    ids = sorted(agent.state.containers)
    usage = await agent.runtime.usage(ids, interval_seconds)
    capacity = agent.capacity
    registered = None
    if capacity is not None:  # what the node registered: the allocator places against it (docs/colocation.md)
        registered = (sum(capacity.cpu_map.values()) / agent.config.share_base, capacity.memory)
    now = time.time()
    sample = sample_wire(agent.node, now, usage, agent.state.containers, pod=agent.config.pod, registered=registered)
    news = LISTED if sample["containers"] else sample_news(sample)
    # an empty node's sample that says nothing new goes out only at its floor (60–90 s)
    floor = quiet_floor(QUIET_SAMPLE_FLOOR_SECONDS, _fraction(agent))
    if not worth_sending(news, bool(sample["containers"]) or bool(ids), agent.last_sample, now, floor):
        agent.samples_skipped += 1
        return sample
    await publish_value(agent.js, agent.metrics_subject, sample, new_envelope("eru.metrics", agent.config.source))
    agent.last_sample = (news, now)
    return sample


def _fraction(agent: NodeAgent) -> float:
    """The node's own fraction in [0, 1) (the place of its reports in their interval): its quiet floor's stretch."""
    return agent.fraction
