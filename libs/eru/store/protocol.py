"""The allocator's store seam (docs/store.md "The allocator's store"), like httpx's transport: the deploy path talks to
an `AllocatorStore` and never knows what is underneath. Two implementations: PostgreSQL over asyncpg
(`eru_allocator.store.postgres`) and in memory (`eru.testing.memory_store`, for unit tests and the simulator).

`store.pod(name)` opens one pod's session: the pod's lock is held and one transaction is open until the block ends
(committed on a normal exit, rolled back on an exception). Inside it, the deploy path reads a `ClusterSnapshot`
and what it needs around it (the pod's policy, the requests already settled, tenants, reservations), decides, and
hands everything it decided to `submit_plan` at once as a `Plan` (eru.store.plans). `submit_plan` is the conflict
check: the nodes the plan touches are re-checked against the newest state and a part that no longer fits is
dropped (`PlanResult.rejected_nodes`), and a request key another replica committed meanwhile raises `Conflict` and
nothing of the batch is written. `submit` writes rows without the node check (the admission pass, which re-reads
under the lock what it decides against).

Rows travel as named tuples in the column order of their tables, so the asyncpg implementation hands them to
`executemany` as they are.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from pydantic import BaseModel

from eru.colocation.backoff import KeepConfig
from eru.envelope import Envelope
from eru.errors import EruError
from eru.fairness.drf import TenantUsage
from eru.planning.request import PlanningConfig
from eru.planning.snapshot import ClusterSnapshot
from eru.store.waits import WaitSession

if TYPE_CHECKING:
    from eru.store.plans import Plan, PlanResult


class Conflict(EruError):
    """A plan that cannot be committed as made: a request key of the batch was committed meanwhile."""

    code = "conflict"


class DecisionRow(NamedTuple):
    """A `decisions` row: the input as an `eru plan` problem and the output, both JSON text."""

    id: str
    kind: str
    input: str
    output: str


class DecisionSnapshotRow(NamedTuple):
    """A `decision_snapshots` row: the nodes a batch's compact decision records name (JSON text, name → node;
    `eru.planning.decision_record`)."""

    id: str
    nodes: str


class DeployRow(NamedTuple):
    """A `deploys` row (`request` and `result` JSON text)."""

    id: str
    request_id: str
    pod: str
    tenant: str
    status: str
    request: str
    result: str


class ContainerRow(NamedTuple):
    """A `containers` row (`allocation`, `resources` and `labels` JSON text)."""

    id: str
    deploy_id: str
    node: str
    pod: str
    workload: str
    image: str
    tenant: str
    priority_class: str
    priority: int
    allocation: str
    resources: str
    state: str
    labels: str
    replaces: str | None


class StoredDeploy(NamedTuple):
    """What a request key already ended in: a live or past deploy, or a settled request (`status`
    `settled:<outcome>`, the message that was settled in `message_id`)."""

    id: str | None
    request_id: str
    status: str
    result: Any
    message_id: str | None


class WaitRow(NamedTuple):
    """A request that waits for capacity or its tenant (`deploy_waits`; JSON text for request, envelope, reason)."""

    deploy_id: str
    request_key: str
    pod: str
    tenant: str
    wait_seconds: float
    request: str
    envelope: str
    reason: str


@dataclass(frozen=True, slots=True)
class Usage:
    """An amount of node resources: pieces per core, bytes, bytes per NUMA node."""

    cpu_map: Mapping[str, int]
    memory: int
    numa_memory: Mapping[str, int]


class OutboxMessage(NamedTuple):
    """A message published once the transaction commits (the outbox, docs/pipeline.md)."""

    subject: str
    message: BaseModel
    envelope: Envelope


@dataclass(slots=True)
class PodWrites:
    """Everything one pod's batch decided, written by `PodSession.submit` in one transaction: decisions (and the
    batch's decision snapshot), deploys, containers and outbox messages, node usage (added, nodes in name order),
    waits."""

    decisions: list[DecisionRow] = field(default_factory=list)
    decision_snapshots: list[DecisionSnapshotRow] = field(default_factory=list)
    deploys: list[DeployRow] = field(default_factory=list)
    containers: list[ContainerRow] = field(default_factory=list)
    usage: dict[str, list[Usage]] = field(default_factory=dict)
    waits: list[WaitRow] = field(default_factory=list)
    messages: list[OutboxMessage] = field(default_factory=list)
    # seconds the outbox rows are held from the relays: the committing process publishes them itself right after the
    # commit (docs/store.md "Publishing after the commit"); None: the relays publish them
    hold_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class SnapshotNeeds:
    """What a batch's snapshot must hold beyond nodes and live counts: the score inputs (QoS mix, scorer weights)
    when a request of the batch uses mode `score`; batch allowances and the eviction memory when one is of class
    `batch`."""

    config: PlanningConfig
    down_after_seconds: float
    score: bool = False
    batch: bool = False
    keep: KeepConfig = field(default_factory=KeepConfig)
    workloads: frozenset[str] | None = None
    """The workloads whose live counts the decisions read (a deploy batch's own); None: every workload of the pod.
    Counting only these keeps a batch's read from growing with everything else live in the pod."""
    labels: bool = False
    """Every node's effective labels (a request of the batch has a node filter, docs/placement-modes.md)."""


class PodSession(WaitSession, Protocol):
    """One pod under its lock, in one transaction (with the pod's waits: `eru.store.waits.WaitSession`)."""

    pod: str

    async def policy(self) -> Mapping[str, Any] | None:
        """The pod's policy object (security keys and `scorers`), None when the pod does not exist."""

    async def pod_names(self, limit: int) -> list[str]:
        """Some pod names in name order (for the error naming an unknown pod)."""

    async def find_deploys(self, keys: Sequence[str]) -> dict[str, StoredDeploy]:
        """What each of these request keys already ended in (keys never seen are absent)."""

    async def policy_and_deploys(self, keys: Sequence[str]) -> tuple[Mapping[str, Any] | None, dict[str, StoredDeploy]]:
        """`policy()` and `find_deploys(keys)` read together (one round trip in PostgreSQL)."""

    async def open_batch(
        self, keys: Sequence[str], needs: SnapshotNeeds
    ) -> tuple[Mapping[str, Any] | None, dict[str, StoredDeploy], ClusterSnapshot]:
        """`policy_and_deploys(keys)` and `snapshot(needs)` read together: what a deploy batch decides against (one
        round trip in PostgreSQL)."""

    async def snapshot(self, needs: SnapshotNeeds) -> ClusterSnapshot:
        """The pod's `ClusterSnapshot` now: schedulable nodes, live counts, tenants, reservations and what each
        tenant holds per node, and what `needs` asks for."""

    async def tenant_usage(self, config: PlanningConfig) -> dict[str, TenantUsage]:
        """What each tenant and group holds in this pod (live containers)."""

    async def has_waiting(self, *, lock: bool = True) -> bool:
        """Whether requests of this pod wait for admission (`lock=False`: read without taking the pod's lock, what
        a deploy batch decides against before it has the lock)."""

    async def peek_batch(
        self, keys: Sequence[str], needs: SnapshotNeeds
    ) -> tuple[Mapping[str, Any] | None, dict[str, StoredDeploy], ClusterSnapshot]:
        """`open_batch` without taking the pod's lock: the committed state a deploy batch decides against and has
        confirmed by the distributor before it takes the lock (docs/pipeline.md "The pod lock and the
        distributor")."""

    async def release(self) -> None:
        """Let the pod's lock go until the session's next locking verb takes it again (a deploy batch's session,
        before a bus round trip); a lock that ends only with its transaction is kept."""

    async def submit(self, writes: PodWrites) -> None:
        """Write the batch (see `PodWrites`); `Conflict` when a request key was committed meanwhile."""

    async def submit_plan(self, plan: Plan) -> PlanResult:
        """Commit `plan` (eru.store.plans) after re-checking the nodes it touches, and only those, against the
        newest state, their rows locked in name order in the writing statement or transaction: the parts whose nodes
        all pass are committed, the others dropped, and when any node was rejected the result carries the pod's
        snapshot read after the commit. `Conflict` when a request key was committed meanwhile (nothing written)."""


class AllocatorStore(Protocol):
    """Where the allocator keeps its record (PostgreSQL, or memory for tests and the simulator)."""

    def pod(self, pod: str) -> AbstractAsyncContextManager[PodSession]:
        """Lock `pod` and open a transaction for the block; commit at its end."""

    def deploy_batch(self, pod: str) -> AbstractAsyncContextManager[PodSession]:
        """`pod` for a deploy batch, whose first verb is `open_batch` and last verb `submit`: the store may take the
        pod's lock with that read and commit with that write (PostgreSQL: no BEGIN or COMMIT round trip); any verb
        called first takes the lock before it runs, and the lock is held until the block ends."""

    async def live_counts(self, pod: str, workloads: Collection[str]) -> dict[str, dict[str, int]]:
        """workload → node → live instances of `workloads` in `pod`, read without the pod's lock (what the committed
        state holds now: planning ahead reads it, and the lock's snapshot confirms it)."""


__all__ = [
    "AllocatorStore",
    "Conflict",
    "ContainerRow",
    "DecisionRow",
    "DecisionSnapshotRow",
    "DeployRow",
    "OutboxMessage",
    "PodSession",
    "PodWrites",
    "SnapshotNeeds",
    "StoredDeploy",
    "Usage",
    "WaitRow",
]
