"""Re-running a recorded decision from its recorded input and comparing with what was recorded (pure; docs/bus.md).

Allocation decisions are recorded by the allocator as `eru plan` problems (the `decisions` table, referenced by the
`decision_id` of deploy events); eviction decisions travel on `eru.eviction.<node>` with their whole input (an
`evict` problem). Replaying calls the same pure functions as `eru plan` and reports every difference by path, so a
decision that does not reproduce says exactly where.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eru.decision_answer import full_answer
from eru.errors import EruError, InvalidInput, PlanningFailure
from eru.plan_api import solve

REPLAYABLE = ("deploy", "capacity", "realloc", "evict", "admission")


@dataclass(frozen=True)
class RecordedDecision:
    """A decision as recorded: its kind, its whole input and the output it produced."""

    decision_id: str
    kind: str
    input: Mapping[str, Any]
    output: Mapping[str, Any]


@dataclass(frozen=True)
class ReplayOutcome:
    """What a replay found: `same` when the re-run output equals the recorded one; `differences` by path."""

    decision_id: str
    kind: str
    same: bool
    differences: list[str] = field(default_factory=list)
    replayed: Mapping[str, Any] = field(default_factory=dict)


def differences(recorded: Any, replayed: Any, path: str = "") -> list[str]:
    """Every place where two JSON values differ (floats within 1e-9), as `path: recorded X, replayed Y`."""
    where = path or "(root)"
    if isinstance(recorded, Mapping) and isinstance(replayed, Mapping):
        found: list[str] = []
        for key in sorted(set(recorded) | set(replayed), key=str):
            child = f"{path}.{key}" if path else str(key)
            if key not in replayed:
                found.append(f"{child}: recorded {recorded[key]!r}, missing from the replay")
            elif key not in recorded:
                found.append(f"{child}: not recorded, replay gives {replayed[key]!r}")
            else:
                found += differences(recorded[key], replayed[key], child)
        return found
    if isinstance(recorded, list) and isinstance(replayed, list):
        found = [f"{where}: recorded {len(recorded)} items, replay gives {len(replayed)}"]
        if len(recorded) == len(replayed):
            found = []
        for index, (left, right) in enumerate(zip(recorded, replayed, strict=False)):
            found += differences(left, right, f"{path}[{index}]")
        return found
    both_numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (recorded, replayed))
    if both_numbers and math.isclose(float(recorded), float(replayed), rel_tol=1e-9, abs_tol=1e-9):
        return []
    return [] if recorded == replayed else [f"{where}: recorded {recorded!r}, replay gives {replayed!r}"]


def eviction_view(answer: Mapping[str, Any], refusals: bool = False) -> dict[str, Any]:
    """The comparable part of an `evict` answer: victims in the order chosen, with reason and release; with
    `refusals`, also the victims an eviction budget kept (docs/colocation.md "Eviction budgets")."""
    victims = answer.get("evict") or []
    view: dict[str, Any] = {"evict": [{"id": v["id"], "reason": v["reason"], "release": v["release"]} for v in victims]}
    if refusals:
        view["refused"] = [{"id": r["id"], "rule": r["rule"]} for r in answer.get("refused") or []]
    return view


def recorded_eviction(event: Mapping[str, Any]) -> RecordedDecision:
    """A `RecordedDecision` from an `EvictionDecision` event body (`eru.eviction.<node>`)."""
    problem = event.get("input")
    if not isinstance(problem, Mapping) or not problem:
        raise InvalidInput("input", "this eviction event carries no recorded input to replay")
    victims = [
        {"id": v["container_id"], "reason": v["reason"], "release": v["release"]} for v in event.get("victims") or []
    ]
    output: dict[str, Any] = {"evict": victims}
    if event.get("kind") in ("evict", "refuse"):
        output["refused"] = [{"id": r["container_id"], "rule": r["rule"]} for r in event.get("refused") or []]
    return RecordedDecision(str(event.get("decision_id", "")), "evict", {**problem, "kind": "evict"}, output)


def replay(recorded: RecordedDecision) -> ReplayOutcome:
    """Re-run `recorded` with the pure planning functions and compare; `InvalidInput` if it cannot be replayed."""
    kind = str(recorded.input.get("kind", recorded.kind))
    if kind not in REPLAYABLE:
        raise InvalidInput("kind", f"decisions of kind {kind!r} cannot be replayed yet (replayable: {REPLAYABLE})")
    try:
        answer: Mapping[str, Any] = solve({**recorded.input, "kind": kind})
    except PlanningFailure as failure:
        answer = {"error": failure.to_dict()}
    except EruError as error:
        raise InvalidInput("input", f"the recorded input no longer validates: {error.message}") from None
    replayed = eviction_view(answer, "refused" in recorded.output) if kind == "evict" else dict(answer)
    output = full_answer(recorded.input, recorded.output) if kind == "deploy" else dict(recorded.output)
    found = differences(output, replayed)
    return ReplayOutcome(recorded.decision_id, kind, not found, found, replayed)
