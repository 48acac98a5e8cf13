"""The periodic reports a sim process makes for all of its nodes at once (docs/node-agent.md "Idle cost"): its
nodes' heartbeats as one `NodeHeartbeats` message per interval on `eru.heartbeats.<group>` (cut by
`eru.nodeagent.heartbeats.chunks`), and one summary line per process.

Each node is reconciled with its runtime exactly as its own heartbeat does (`NodeAgent.beat`); only the publication
differs: at 5,000 nodes one stream message per node every 5 s was 1,000 messages a second into nats-server and the
allocator's heartbeat consumer with nothing deployed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog

from eru.bus import new_envelope, publish
from eru.bus.subjects import group_heartbeats
from eru.domain.messages import Heartbeat, NodeHeartbeats
from eru.nodeagent.heartbeats import chunks

if TYPE_CHECKING:
    from eru_node_agent.agent import NodeAgent

log = structlog.get_logger()


async def group_heartbeat_once(agents: Sequence[NodeAgent], group: str) -> int:
    """Reconcile every started node and publish their heartbeats on `eru.heartbeats.<group>`; the nodes sent. A node
    whose reconcile fails is logged and left out of this beat (its TTL covers a few misses)."""
    beats: list[Heartbeat] = []
    for agent in agents:
        if not agent.started.is_set():
            continue
        try:
            beats.append(await agent.beat())
        except Exception as error:  # one node's failure must not silence the others
            log.warning("node_agent.heartbeat_failed", node=agent.node, error=f"{type(error).__name__}: {error}")
    if not beats:
        return 0
    source = agents[0].config.source
    subject = group_heartbeats(group)
    for part in chunks(beats):
        envelope = new_envelope("eru.node.heartbeats", source)
        await publish(agents[0].js, subject, NodeHeartbeats(group=group, beats=part, group_batches=True), envelope)
    return len(beats)


def process_summary(agents: Sequence[NodeAgent]) -> dict[str, int]:
    """Log (at info) what the process's nodes did since the last summary — commands by kind and result — as one
    line for the process, and reset each node's counts."""
    counts: Counter[str] = Counter()
    for agent in agents:
        counts.update(agent.summary)
        agent.summary.clear()
    results = dict(sorted(counts.items()))
    log.info(
        "node_agent.summary",
        nodes=len(agents),
        started=sum(1 for agent in agents if agent.started.is_set()),
        commands=sum(results.values()),
        results=results,
        containers=sum(len(agent.state.containers) for agent in agents),
    )
    return results
