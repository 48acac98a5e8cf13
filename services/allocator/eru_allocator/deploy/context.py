"""What the deploy pipeline needs from the running service (`Context`), and a batch's item: the request, its
normalised requirement and the envelope it came in."""

from __future__ import annotations

from dataclasses import dataclass, field

from eru.bus import Envelope
from eru.bus.protocol import Bus
from eru.colocation.backoff import KeepConfig
from eru.domain import DeployRequest
from eru.planning import NormalizedRequest, PlanningConfig
from eru.planning.analysis_cache import AnalysisCache
from eru.planning.decide import NodeCache
from eru.planning.decision_record import SnapshotChain
from eru.store.protocol import AllocatorStore
from eru_allocator.delivery.dead_letter_gate import DeadLetterGate
from eru_allocator.delivery.publisher import CommittedPublisher
from eru_allocator.deploy.plan_ahead import PodLine


@dataclass(frozen=True)
class Context:
    """What a deploy needs from the running service."""

    store: AllocatorStore
    bus: Bus
    config: PlanningConfig
    source: str
    place_timeout_seconds: float
    node_down_after_seconds: float
    keep: KeepConfig = field(default_factory=KeepConfig)  # eviction memory back-offs (docs/colocation.md)
    plan_ahead: bool = True  # plan a pod's next batch while the current one commits (eru_allocator.deploy.plan_ahead)
    line: PodLine = field(default_factory=PodLine)
    # every dead letter recorded before a batch looks its keys up (eru_allocator.delivery.dead_letter_gate);
    # None: no check
    dead_letters: DeadLetterGate | None = None
    # publishes a batch's outbox rows right after its commit (eru_allocator.delivery.publisher); None: the relays do
    publisher: CommittedPublisher | None = None
    # the recorded text of each node object the batches' snapshots held, reused while the node is unchanged
    # (eru.planning.decision_record.RecordBook; the node cache keeps unchanged nodes the same objects)
    node_texts: NodeCache = field(default_factory=dict)
    # node analyses kept across batches while a node is unchanged (docs/planning.md "Per-batch cost")
    analyses: AnalysisCache = field(default_factory=AnalysisCache)
    # per pod, the last full snapshot row this process committed: a batch stores only the nodes that differ from it
    chains: dict[str, SnapshotChain] = field(default_factory=dict)


Item = tuple[DeployRequest, NormalizedRequest, Envelope]
