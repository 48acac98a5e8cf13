"""Messages of the eviction service (docs/colocation.md): node conditions and eviction/suppression decisions.

`NodeCondition` goes to `eru.node.<node>.condition` (the allocator honours `forbid_schedule_*` for batch placements
and places batch against `batch_cpu_capacity` / `batch_memory_capacity`); `EvictionDecision` goes to
`eru.eviction.<node>` with the decision's whole input (a docs/planning.md `evict` problem) so `eru plan` can replay it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from eru.domain.messages import Name
from eru.domain.resources import Frozen

WatermarkState = Literal["normal", "forbid", "suppressed", "evicting"]


class NodeCondition(Frozen):
    """A node's watermark state and reclaimed batch capacity, as the eviction service sees it."""

    node: Name
    time: float
    state: WatermarkState = "normal"
    forbid_schedule_cpu: bool = False
    forbid_schedule_memory: bool = False
    batch_cpu_allowed: float | None = None
    evicting: list[str] = Field(default_factory=list)
    batch_cpu_capacity: float = 0.0
    batch_memory_capacity: int = 0
    cpu_percent: float | None = None
    memory_percent: float | None = None
    # Room sized for the coming peak (docs/colocation.md): latency-sensitive CPU peak over the horizon, in cores.
    ls_cpu_peak: float | None = None
    room_cpu: float | None = None
    room_horizon_seconds: float = 0.0
    room_covered_seconds: float = 0.0
    replica: str = ""
    # the node's effective watermarks (percent of capacity: cpu_forbid, cpu_suppress, cpu_evict, memory_forbid,
    # memory_evict), so that a reader can draw the bands against cpu_percent / memory_percent
    watermarks: dict[str, int] = Field(default_factory=dict)

    @property
    def forbid_schedule(self) -> bool:
        """True when no new batch instance may be placed on the node."""
        return self.forbid_schedule_cpu or self.forbid_schedule_memory


class EvictionVictim(Frozen):
    """One container chosen to go: `release` is cores of request (cpu) or bytes of usage (memory)."""

    container_id: str
    reason: Literal["cpu-satisfaction", "memory"]
    release: float
    priority: int = 0
    workload: str = ""
    evictions: int = 0  # earlier evictions of this instance (its lineage)
    budget_left: int | None = None  # evictions the workload's budget still admits after this one
    work_lost: float = 0.0  # CPU-seconds of batch work thrown away


class EvictionRefusal(Frozen):
    """A victim an eviction budget kept: the node is only suppressed for it."""

    container_id: str
    workload: str
    reason: Literal["cpu-satisfaction", "memory"]
    rule: str = "budget"


class EvictionDecision(Frozen):
    """A suppress or evict decision, the numbers behind it and its whole input (replayable with `eru plan`)."""

    decision_id: str
    node: Name
    time: float
    kind: Literal["evict", "suppress", "unsuppress", "refuse"]
    reason: str
    victims: list[EvictionVictim] = Field(default_factory=list)
    refused: list[EvictionRefusal] = Field(default_factory=list)
    batch_cpu_allowed: float | None = None
    quotas: dict[str, float] = Field(default_factory=dict)
    numbers: dict[str, Any] = Field(default_factory=dict)
    input: dict[str, Any] = Field(default_factory=dict)
    replica: str = ""
