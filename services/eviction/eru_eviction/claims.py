"""Claiming a decision's evictions against the shared budgets before any command goes out, and counting the kill
path (docs/colocation.md "Eviction budgets", "Kill-path metrics")."""

from __future__ import annotations

from typing import Any

import structlog

from eru import telemetry
from eru.colocation.outcome import Outcome
from eru.colocation.tracker import NodeTracker
from eru.domain.colocation import EvictionDecision, EvictionRefusal
from eru_eviction.budgets import BudgetBook

log = structlog.get_logger()


async def claim_budgets(book: BudgetBook, tracker: NodeTracker | None, pod: str | None, outcome: Outcome) -> Outcome:
    """`outcome` with the victims the shared budgets refuse taken out: their evict commands dropped, the event's
    victims moved to `refused` (rule `budget`), the tracker no longer waiting for them to go."""
    refused: set[str] = set()
    events: list[EvictionDecision] = []
    for event in outcome.events:
        if event.kind != "evict":
            events.append(event)
            continue
        workloads = _budgets(event.numbers)
        per_workload: dict[str, list[str]] = {}
        for victim in event.victims:
            if victim.budget_left is not None and victim.workload in workloads:
                per_workload.setdefault(victim.workload, []).append(victim.container_id)
        lost: set[str] = set()
        for workload, ids in per_workload.items():
            allowed, window = workloads[workload]
            admitted = await book.claim(pod, workload, allowed, window, ids, event.time)
            lost |= set(ids) - set(admitted)
        if lost:
            refused |= lost
            kept = [v for v in event.victims if v.container_id not in lost]
            extra = [
                EvictionRefusal(container_id=v.container_id, workload=v.workload, reason=v.reason, rule="budget-claim")
                for v in event.victims
                if v.container_id in lost
            ]
            log.info("eviction.budget.refused", node=event.node, refused=sorted(lost))
            event = event.model_copy(
                update={"victims": kept, "refused": [*event.refused, *extra], "kind": "evict" if kept else "refuse"}
            )
        events.append(event)
    if not refused:
        return outcome
    if tracker is not None:
        for cid in refused:
            tracker.pending.pop(cid, None)
    outcome.commands = [c for c in outcome.commands if not (c.kind == "evict" and c.container_id in refused)]
    outcome.events = events
    return outcome


def _budgets(numbers: dict[str, Any]) -> dict[str, tuple[int, float]]:
    """workload → (allowed evictions, window seconds) from a decision's recorded budget numbers."""
    found: dict[str, tuple[int, float]] = {}
    budget = numbers.get("budget")
    workloads = budget.get("workloads") if isinstance(budget, dict) else None
    for name, item in (workloads or {}).items():
        if isinstance(item, dict) and isinstance(item.get("allowed"), int):
            found[name] = (int(item["allowed"]), float(item.get("window_seconds", 600.0)))
    return found


def count_decision(event: EvictionDecision) -> None:
    """Prometheus counters of one published decision."""
    for victim in event.victims:
        telemetry.EVICTIONS.labels(victim.reason).inc()
        workload = victim.workload or "-"
        telemetry.COLOCATION_EVICTIONS.labels(victim.reason, event.node, workload).inc()
        telemetry.COLOCATION_WORK_LOST.labels(workload).observe(victim.work_lost)
    for refusal in event.refused:
        telemetry.COLOCATION_BUDGET_REFUSALS.labels(refusal.workload or "-").inc()
    if event.kind == "suppress":
        telemetry.COLOCATION_SUPPRESSIONS.labels(event.node).inc()
