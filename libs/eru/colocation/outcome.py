"""What one sample calls for (`Outcome`), the sample's sanity check, and a decision's victims and refusals as the
eviction events carry them (pure; used by `eru.colocation.tracker`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from eru.colocation.policy import ContainerInfo, Decision, Victim
from eru.colocation.window import cores
from eru.domain.colocation import EvictionDecision, EvictionRefusal, EvictionVictim, NodeCondition
from eru.domain.messages import NodeCommand, NodeMetrics
from eru.errors import InvalidInput


@dataclass
class Outcome:
    """What one sample calls for."""

    accepted: bool
    decision_id: str = ""
    commands: list[NodeCommand] = field(default_factory=list)
    events: list[EvictionDecision] = field(default_factory=list)
    condition: NodeCondition | None = None
    decision: Decision | None = None


def check_sample(metrics: NodeMetrics) -> None:
    """`InvalidInput` naming the first number of a sample that is not finite, negative, or a zero capacity."""
    numbers = {
        "time": metrics.time,
        "cpu_capacity": metrics.cpu_capacity,
        "cpu_used": metrics.cpu_used,
        "batch_cpu_allowed": metrics.batch_cpu_allowed or 0.0,
    }
    for name, value in numbers.items():
        if not math.isfinite(value) or (name != "time" and value < 0):
            raise InvalidInput(name, f"expected a finite, non-negative number, got {value!r}")
    if metrics.cpu_capacity <= 0 or metrics.memory_total <= 0:
        raise InvalidInput("cpu_capacity", "node capacity must be above 0 (cpu_capacity and memory_total)")
    if metrics.memory_used < 0:
        raise InvalidInput("memory_used", f"must not be negative, got {metrics.memory_used}")


def eviction_victim(victim: Victim, registry: Mapping[str, ContainerInfo]) -> EvictionVictim:
    """A chosen victim as the decision event carries it (release in cores, or bytes for memory)."""
    release = float(victim.release) if victim.reason == "memory" else cores(victim.release)
    info = registry.get(victim.id)
    reason: Literal["cpu-satisfaction", "memory"] = "memory" if victim.reason == "memory" else "cpu-satisfaction"
    return EvictionVictim(
        container_id=victim.id,
        reason=reason,
        release=release,
        priority=info.priority if info else 0,
        workload=victim.workload,
        evictions=victim.evictions,
        budget_left=victim.budget_left,
        work_lost=info.work if info else 0.0,
    )


def refusals(decision: Decision) -> list[EvictionRefusal]:
    """The victims a budget kept, as the decision event carries them."""
    return [
        EvictionRefusal(
            container_id=r.id,
            workload=r.workload,
            reason="memory" if r.reason == "memory" else "cpu-satisfaction",
            rule=r.rule,
        )
        for r in decision.refused
    ]
