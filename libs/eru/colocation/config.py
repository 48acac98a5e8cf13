"""Colocation configuration (docs/colocation.md): watermarks, satisfaction bounds, windows, cool-downs, reservation
parameters.

A configuration is layered: defaults < the pod's settings < the node's overrides. Each layer is a plain mapping of
the field names of docs/planning.md; the merged result is validated once, and every error names the field as it was
written in the layer that set it (`pods.web.cpu_suppress`, `nodes.n1.cpu_evict`), so an operator can find the bad line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from eru.colocation.budget import Budget, parse_max_unavailable
from eru.errors import InvalidInput
from eru.units import parse_percent

PERCENT_FIELDS = (
    "cpu_forbid",
    "cpu_suppress",
    "cpu_evict",
    "memory_forbid",
    "memory_evict",
    "satisfaction_lower",
    "satisfaction_upper",
    "batch_util_threshold",
    "forbid_hysteresis",
    "suppress_step_percent",
    "suppress_hysteresis",
    "reservation_margin_percent",
    "memory_critical",
)
SECONDS_FIELDS = (
    "window_seconds",
    "cpu_cooldown_seconds",
    "memory_cooldown_seconds",
    "metrics_interval_seconds",
    "reservation_startup_seconds",
    "reservation_half_life_seconds",
    "reservation_peak_window_seconds",
    "room_horizon_seconds",
    "budget_window_seconds",
    "suppress_dwell_seconds",
)
BOOL_FIELDS = ("prefer_least_work",)
POSITIVE_PERCENTS = {
    # satisfaction_upper ≥ satisfaction_lower > 0 (docs/colocation.md): lower 0 would switch CPU eviction off silently
    # (satisfaction is never below 0), and the release divides by upper.
    "satisfaction_lower": "0 would switch CPU eviction off: satisfaction is never below 0",
    "satisfaction_upper": "the release divides by it",
    "suppress_step_percent": "0 would never let a suppressed batch allowance rise again",
}
_POSITIVE = frozenset(
    {
        "window_seconds",
        "metrics_interval_seconds",
        "reservation_half_life_seconds",
        "reservation_peak_window_seconds",
        "budget_window_seconds",
    }
)


@dataclass(frozen=True, slots=True)
class ColocationConfig:
    """One node's effective colocation settings; percentages are integers 0..100 of the node's capacity."""

    cpu_forbid: int = 65
    cpu_suppress: int = 65
    cpu_evict: int = 75
    memory_forbid: int = 65
    memory_evict: int = 70
    satisfaction_lower: int = 60
    satisfaction_upper: int = 80
    batch_util_threshold: int = 90
    window_seconds: float = 300.0
    cpu_cooldown_seconds: float = 20.0
    memory_cooldown_seconds: float = 4.0
    metrics_interval_seconds: float = 5.0
    # A forbid-schedule condition clears only once usage is this many points below the watermark.
    forbid_hysteresis: int = 5
    # Suppression raises the batch allowance by at most this share of node CPU per sample; cuts are immediate.
    suppress_step_percent: int = 10
    # The allowance moves only when its target leaves a band of this share of node CPU around it (cuts at once, raises
    # and the lift after `suppress_dwell_seconds` since the last change): a steady, noisy load changes nothing.
    suppress_hysteresis: int = 5
    suppress_dwell_seconds: float = 20.0
    reservation_startup_seconds: float = 300.0
    reservation_half_life_seconds: float = 600.0
    reservation_peak_window_seconds: float = 300.0
    reservation_margin_percent: int = 10
    # Batch room is sized for the latency-sensitive peak over this horizon (≥ one load cycle); 0 = reservations only.
    room_horizon_seconds: float = 3600.0
    # Eviction budget of a batch workload (a count or "N%" of its desired count) per window, docs/colocation.md.
    max_unavailable: str = "25%"
    budget_window_seconds: float = 600.0
    # At or above this node memory share a memory eviction goes ahead even when the budget is spent.
    memory_critical: int = 90
    # Among equal candidates evict the one that has done the least work (CPU-seconds) first.
    prefer_least_work: bool = True

    def to_dict(self) -> dict[str, Any]:
        """The configuration as JSON in the schema of docs/planning.md (every field, so a recorded decision carries its
        whole config)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


FIELD_NAMES = frozenset(f.name for f in fields(ColocationConfig))


def _seconds(value: object, field: str, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(field, f"expected a number of seconds, got {value!r}")
    if abs(value) > 1e12:  # ~30,000 years; also keeps float() and later arithmetic from overflowing
        raise InvalidInput(field, f"must be within ±1e12 seconds, got {value!r}")
    number = float(value)
    if number != number or number in (float("inf"), float("-inf")):
        raise InvalidInput(field, f"expected a finite number of seconds, got {value!r}")
    if positive and number <= 0:
        raise InvalidInput(field, f"must be greater than 0 seconds, got {value!r}")
    if number < 0:
        raise InvalidInput(field, f"must not be negative, got {value!r}")
    return number


def resolve_config(*layers: tuple[str, Mapping[str, Any] | None]) -> ColocationConfig:
    """Merge `(field_prefix, mapping)` layers over the defaults (later wins) and validate the result.

    Example: `resolve_config(("config", pod_settings), ("nodes.n1", node_overrides))`. Unknown fields, values of the
    wrong type or out of range, a broken order (evict ≥ suppress ≥ forbid, upper ≥ lower) and a zero where
    docs/colocation.md asks for > 0 (`POSITIVE_PERCENTS`, windows and intervals) are `InvalidInput` naming the field
    under the prefix of the layer that set it.
    """
    values: dict[str, Any] = {}
    origin: dict[str, tuple[int, str]] = {}
    for rank, (prefix, layer) in enumerate(layers):
        if layer is None:
            continue
        if not isinstance(layer, Mapping):
            raise InvalidInput(prefix, f"expected an object of colocation settings, got {type(layer).__name__}")
        for key, value in layer.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            if key not in FIELD_NAMES:
                raise InvalidInput(name, f"unknown setting (known: {', '.join(sorted(FIELD_NAMES))})")
            if key in PERCENT_FIELDS:
                values[key] = parse_percent(value, name)
            elif key in BOOL_FIELDS:
                if not isinstance(value, bool):
                    raise InvalidInput(name, f"expected true or false, got {value!r}")
                values[key] = value
            elif key == "max_unavailable":
                count, percent = parse_max_unavailable(value, name)
                values[key] = str(count) if count is not None else f"{percent}%"
            else:
                values[key] = _seconds(value, name, key in _POSITIVE)
            origin[key] = (rank, name)
    config = ColocationConfig(**values)

    def where(key: str) -> str:
        if key in origin:
            return origin[key][1]
        prefix = layers[-1][0] if layers else ""
        return f"{prefix}.{key}" if prefix else key

    def ordered(high: str, low: str) -> None:
        high_value, low_value = getattr(config, high), getattr(config, low)
        if high_value < low_value:
            # Name the field set by the latest layer among the two: that is the edit that broke the order.
            culprit = low if origin.get(low, (-1, ""))[0] >= origin.get(high, (-1, ""))[0] else high
            raise InvalidInput(
                where(culprit),
                f"{high} ({high_value}) must be at least {low} ({low_value})"
                + (": watermarks go evict ≥ suppress ≥ forbid" if high.endswith(("_evict", "_suppress")) else ""),
                **{high: high_value, low: low_value},
            )

    ordered("cpu_evict", "cpu_suppress")
    ordered("cpu_suppress", "cpu_forbid")
    ordered("memory_evict", "memory_forbid")
    ordered("satisfaction_upper", "satisfaction_lower")
    for key, why in POSITIVE_PERCENTS.items():
        if getattr(config, key) == 0:
            raise InvalidInput(where(key), f"must be above 0 ({why})", **{key: 0})
    return config


def pod_budget(config: ColocationConfig) -> Budget:
    """The eviction budget a pod's (or node's) configuration gives its batch workloads."""
    count, percent = parse_max_unavailable(config.max_unavailable, "max_unavailable")
    return Budget(count, percent, config.budget_window_seconds)


def parse_config(raw: Mapping[str, Any] | None, field_prefix: str = "config") -> ColocationConfig:
    """One mapping of settings (docs/planning.md `config`) over the defaults, validated."""
    return resolve_config((field_prefix, raw))
