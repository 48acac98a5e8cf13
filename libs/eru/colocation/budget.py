"""Eviction budgets (docs/colocation.md "Eviction budgets"): how many instances of a batch workload may be evicted
within a sliding window, counted over every node and every eviction-service replica.

A budget is `max_unavailable` — a count (`3`) or a percentage of the workload's desired count (`"25%"`, rounded up
like a Kubernetes PodDisruptionBudget, so 25% of 1 is 1) — over `window_seconds`. The evictions already made are an
input (the recorded history), `now` is given: `remaining` is a pure function. `take` splits a decision's victims into
those the budgets admit and those they refuse, naming the rule that decided each.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eru.bounded import clip
from eru.errors import InvalidInput

DEFAULT_MAX_UNAVAILABLE = "25%"
DEFAULT_WINDOW_SECONDS = 600.0
BUDGET_FIELDS = ("max_unavailable", "window_seconds")


@dataclass(frozen=True, slots=True)
class Budget:
    """`count` instances, or `percent` % of the desired count, per `window_seconds` (exactly one of the two set)."""

    count: int | None = None
    percent: int | None = 25
    window_seconds: float = DEFAULT_WINDOW_SECONDS

    def allowed(self, desired: int) -> int:
        """Evictions the budget admits per window for a workload of `desired` instances."""
        if self.count is not None:
            return self.count
        return math.ceil(max(0, desired) * (self.percent or 0) / 100)

    def text(self) -> str:
        """The budget as written (`3` or `25%`)."""
        return str(self.count) if self.count is not None else f"{self.percent}%"


def parse_max_unavailable(value: object, field: str) -> tuple[int | None, int | None]:
    """`(count, None)` for an integer ≥ 0, `(None, percent)` for `"N%"` with N in 0..100; `InvalidInput` otherwise."""
    if isinstance(value, bool):
        raise InvalidInput(field, f"expected a count or a percentage like '25%', got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise InvalidInput(field, f"must not be negative, got {value}")
        return value, None
    if isinstance(value, str):
        text = value.strip()
        if text.endswith("%"):
            digits = text[:-1].strip()
            if _digits(digits, 3) and int(digits) <= 100:
                return None, int(digits)
            raise InvalidInput(field, f"percentage must be an integer within 0..100, got {clip(value)!r}")
        if _digits(text, COUNT_DIGITS_MAX):
            return int(text), None
    raise InvalidInput(field, f"expected a count or a percentage like '25%', got {clip(str(value))!r}")


COUNT_DIGITS_MAX = 9
"""A count of at most 9 digits: `int()` of a 100,000-digit string is refused by Python itself (ValueError above
4,300 digits), and no workload has a billion instances."""


def _digits(text: str, most: int) -> bool:
    """`text` is 1 to `most` ASCII digits (`str.isdigit` also takes `²`, which `int()` refuses)."""
    return 0 < len(text) <= most and text.isascii() and text.isdigit()


def parse_budget(raw: Mapping[str, Any] | None, field: str, base: Budget | None = None) -> Budget:
    """A budget from `{"max_unavailable": 3 | "25%", "window_seconds": 600}` over `base` (the pod's, else the
    defaults); unknown keys and bad values are `InvalidInput` naming `<field>.<key>`."""
    budget = base or Budget()
    if raw is None:
        return budget
    if not isinstance(raw, Mapping):
        raise InvalidInput(field, f"expected an object with {', '.join(BUDGET_FIELDS)}, got {type(raw).__name__}")
    count, percent, window = budget.count, budget.percent, budget.window_seconds
    for key, value in raw.items():
        if key == "max_unavailable":
            count, percent = parse_max_unavailable(value, f"{field}.max_unavailable")
        elif key == "window_seconds":
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise InvalidInput(f"{field}.window_seconds", f"expected a number of seconds above 0, got {value!r}")
            window = float(value)
        else:
            raise InvalidInput(f"{field}.{key}", f"unknown budget setting (known: {', '.join(BUDGET_FIELDS)})")
    return Budget(count, percent, window)


@dataclass(frozen=True, slots=True)
class WorkloadBudget:
    """What a decision knows of one workload's budget: the budget, its desired count and the evictions so far."""

    workload: str
    budget: Budget
    desired: int
    evictions: tuple[float, ...] = ()  # times of this workload's evictions (any node, any replica)

    def used(self, now: float) -> int:
        """Evictions inside the window ending at `now` (a time exactly `window_seconds` ago has left it)."""
        start = now - self.budget.window_seconds
        return sum(1 for t in self.evictions if start < t <= now)

    def remaining(self, now: float) -> int:
        """Evictions still admitted at `now` (never below 0)."""
        return max(0, self.budget.allowed(self.desired) - self.used(now))

    def to_dict(self, now: float) -> dict[str, Any]:
        """The budget as recorded in a decision's input and numbers."""
        return {
            "workload": self.workload,
            "max_unavailable": self.budget.text(),
            "window_seconds": self.budget.window_seconds,
            "desired": self.desired,
            "evictions": list(self.evictions),
            "allowed": self.budget.allowed(self.desired),
            "remaining": self.remaining(now),
        }


def budget_from_dict(raw: Mapping[str, Any], field: str) -> WorkloadBudget:
    """A recorded `WorkloadBudget` (`to_dict` form) back; `InvalidInput` naming the field."""
    name = raw.get("workload")
    if not isinstance(name, str):
        raise InvalidInput(f"{field}.workload", f"expected a string, got {name!r}")
    budget = parse_budget(
        {
            "max_unavailable": raw.get("max_unavailable", DEFAULT_MAX_UNAVAILABLE),
            "window_seconds": raw.get("window_seconds", DEFAULT_WINDOW_SECONDS),
        },
        field,
    )
    desired = raw.get("desired", 0)
    if isinstance(desired, bool) or not isinstance(desired, int) or desired < 0:
        raise InvalidInput(f"{field}.desired", f"expected a count ≥ 0, got {desired!r}")
    times = raw.get("evictions", [])
    if not isinstance(times, list) or any(isinstance(t, bool) or not isinstance(t, int | float) for t in times):
        raise InvalidInput(f"{field}.evictions", "expected a list of times (seconds)")
    return WorkloadBudget(name, budget, desired, tuple(float(t) for t in times))


@dataclass(frozen=True, slots=True)
class Refusal:
    """A victim the budget kept: which workload, how many evictions its window already holds, and the rule."""

    id: str
    workload: str
    reason: str
    rule: str


def take(
    victims: Sequence[tuple[str, str, str]],
    budgets: Mapping[str, WorkloadBudget],
    now: float,
    *,
    critical: bool = False,
) -> tuple[list[str], list[Refusal], dict[str, int]]:
    """Split `victims` (id, workload, reason) in order into admitted ids and refusals.

    A victim whose workload has no budget here is admitted. A CPU victim needs one eviction left in its workload's
    window. A memory victim does too, unless `critical` (the node is about to run out of memory): then the
    out-of-memory rule wins over the budget, and the decision says so. Returns also what is left per workload.
    """
    left = {name: budget.remaining(now) for name, budget in budgets.items()}
    admitted: list[str] = []
    refused: list[Refusal] = []
    for cid, workload, reason in victims:
        if workload not in left:
            admitted.append(cid)
            continue
        if left[workload] > 0:
            left[workload] -= 1
            admitted.append(cid)
        elif reason == "memory" and critical:
            admitted.append(cid)  # out of memory beats the budget: prod/mid would be OOM-killed otherwise
        else:
            refused.append(Refusal(cid, workload, reason, "budget"))
    return admitted, refused, left


def times_of(history: Iterable[tuple[str, float]], workload: str) -> tuple[float, ...]:
    """The eviction times of `workload` in a history of (workload, time) pairs, sorted."""
    return tuple(sorted(t for name, t in history if name == workload))
