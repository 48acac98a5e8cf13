"""The world of `eru sim colocation` (docs/colocation.md "The experiment"): which policy pieces are on, the pod and its
batch workload, one batch instance's lineage, and what a run measured (pure data)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from eru.colocation.backoff import Eviction
from eru.colocation.config import ColocationConfig
from eru.planning import ContainerPlan

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class Policy:
    """Which pieces of eru's policy are on (all off = eru before issue 18)."""

    peak_room: bool = True
    node_backoff: bool = True
    budget: bool = True
    progress: bool = True
    keep: bool = True

    def name(self) -> str:
        """`baseline`, `policy`, or the pieces that are on."""
        on = [k for k in ("peak_room", "node_backoff", "budget", "progress", "keep") if getattr(self, k)]
        return "policy" if len(on) == 5 else "baseline" if not on else "+".join(on)


BASELINE = Policy(False, False, False, False, False)


@dataclass(frozen=True, slots=True)
class Scenario:
    """The pod and the batch workload."""

    nodes: int = 8
    cores: int = 32
    node_memory: int = 128 * GIB
    ls_request_share: float = 0.85  # prod's request per node (what its reservation is capped at)
    instances: int = 40
    instance_cpu: int = 2
    instance_memory: int = 4 * GIB
    job_cpu_seconds: float = 2 * 3600.0  # work of one job: an hour at 2 cores
    hours: float = 2.0
    step_seconds: float = 5.0
    warmup_seconds: float = 3600.0  # the pod runs its latency-sensitive load this long before batch arrives
    resubmit_seconds: float = 5.0  # without `keep`: something outside re-submits an evicted instance this soon


@dataclass
class Instance:
    """One logical batch instance (its lineage) and its current container."""

    lineage: str
    generation: int = 0
    node: str | None = None
    plan: ContainerPlan | None = None
    placed_at: float = 0.0
    ready_at: float = 0.0
    progress: float = 0.0
    quota: float | None = None
    evictions: list[float] = field(default_factory=list)
    done_at: float | None = None
    gave_up_at: float | None = None
    waiting: float = 0.0

    @property
    def container(self) -> str:
        """The current container's id."""
        return f"{self.lineage}-{self.generation}"


@dataclass
class Totals:
    """What the run measured."""

    evictions: list[Eviction] = field(default_factory=list)
    lost: float = 0.0
    replacements: int = 0
    back_within_backoff: int = 0
    refusals: int = 0
    ls_samples: int = 0
    ls_satisfied: int = 0
    suppressed_samples: int = 0
    # Reclaim (node-samples from t = 0): LS + batch used, capacity, batch used, room under the suppress line.
    node_used: float = 0.0
    node_capacity: float = 0.0
    batch_used: float = 0.0
    room: float = 0.0
    series: dict[str, list[float]] = field(default_factory=dict)


def colocation_config(policy: Policy, base: ColocationConfig) -> ColocationConfig:
    """`base` with the pieces `policy` turns off switched off."""
    return replace(
        base,
        room_horizon_seconds=base.room_horizon_seconds if policy.peak_room else 0.0,
        max_unavailable=base.max_unavailable if policy.budget else "100%",
        prefer_least_work=policy.progress,
    )
